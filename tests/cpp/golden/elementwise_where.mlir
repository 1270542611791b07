module @torch_tpu {
  func.func public @main(%0: tensor<4xi1>, %1: tensor<4xf32>, %2: tensor<f32>) -> (tensor<4xf32>) {
    %3 = "stablehlo.broadcast_in_dim"(%2) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %4 = "stablehlo.select"(%0, %1, %3) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%4) : (tensor<4xf32>) -> ()
  }
}
