module @torch_tpu {
  func.func public @main(%0: tensor<2x2xf32>, %1: tensor<f32>) -> (tensor<2x2xf32>) {
    %2 = "stablehlo.broadcast_in_dim"(%1) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<2x2xf32>
    "func.return"(%2) : (tensor<2x2xf32>) -> ()
  }
}
