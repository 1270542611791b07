module @torch_tpu {
  func.func public @main(%0: tensor<2x3xf32>) -> (tensor<2xf32>) {
    %1 = "stablehlo.constant"() {value = dense<0x00000000> : tensor<f32>} : () -> tensor<f32>
    %5 = "stablehlo.reduce"(%0, %1) ({
      ^bb0(%2: tensor<f32>, %3: tensor<f32>):
        %4 = "stablehlo.add"(%2, %3) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%4) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
    "func.return"(%5) : (tensor<2xf32>) -> ()
  }
}
