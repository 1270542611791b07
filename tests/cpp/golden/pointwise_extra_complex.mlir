module @torch_tpu {
  func.func public @main(%0: tensor<3xf32>, %1: tensor<3xf32>) -> (tensor<3xcomplex<f32>>) {
    %2 = "stablehlo.complex"(%0, %1) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xcomplex<f32>>
    "func.return"(%2) : (tensor<3xcomplex<f32>>) -> ()
  }
}
