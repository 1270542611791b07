module @torch_tpu {
  func.func public @main(%0: tensor<4xf32>, %1: tensor<4xf32>) -> (tensor<f32>) {
    %2 = "stablehlo.subtract"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %3 = "stablehlo.multiply"(%2, %2) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %4 = "stablehlo.constant"() {value = dense<0x00000000> : tensor<f32>} : () -> tensor<f32>
    %8 = "stablehlo.reduce"(%3, %4) ({
      ^bb0(%5: tensor<f32>, %6: tensor<f32>):
        %7 = "stablehlo.add"(%5, %6) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%7) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
    %9 = "stablehlo.constant"() {value = dense<0x40800000> : tensor<f32>} : () -> tensor<f32>
    %10 = "stablehlo.divide"(%8, %9) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    "func.return"(%10) : (tensor<f32>) -> ()
  }
}
