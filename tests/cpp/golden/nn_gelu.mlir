module @torch_tpu {
  func.func public @main(%0: tensor<4xf32>) -> (tensor<4xf32>) {
    %1 = "stablehlo.constant"() {value = dense<0x3F3504F3> : tensor<f32>} : () -> tensor<f32>
    %2 = "stablehlo.broadcast_in_dim"(%1) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %3 = "stablehlo.multiply"(%0, %2) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %4 = "chlo.erf"(%3) : (tensor<4xf32>) -> tensor<4xf32>
    %5 = "stablehlo.constant"() {value = dense<0x3F800000> : tensor<f32>} : () -> tensor<f32>
    %6 = "stablehlo.broadcast_in_dim"(%5) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %7 = "stablehlo.add"(%6, %4) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %8 = "stablehlo.constant"() {value = dense<0x3F000000> : tensor<f32>} : () -> tensor<f32>
    %9 = "stablehlo.broadcast_in_dim"(%8) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %10 = "stablehlo.multiply"(%9, %7) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %11 = "stablehlo.multiply"(%0, %10) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%11) : (tensor<4xf32>) -> ()
  }
}
