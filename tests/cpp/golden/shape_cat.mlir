module @torch_tpu {
  func.func public @main(%0: tensor<2x3xf32>, %1: tensor<1x3xf32>) -> (tensor<3x3xf32>) {
    %2 = "stablehlo.concatenate"(%0, %1) {dimension = 0 : i64} : (tensor<2x3xf32>, tensor<1x3xf32>) -> tensor<3x3xf32>
    "func.return"(%2) : (tensor<3x3xf32>) -> ()
  }
}
