module @torch_tpu {
  func.func public @main(%0: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
    %1 = "stablehlo.constant"() {value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>
    %5 = "stablehlo.reduce"(%0, %1) ({
      ^bb0(%2: tensor<f32>, %3: tensor<f32>):
        %4 = "stablehlo.maximum"(%2, %3) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%4) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
    %6 = "stablehlo.broadcast_in_dim"(%5) {broadcast_dimensions = array<i64: 0>} : (tensor<2xf32>) -> tensor<2x3xf32>
    %7 = "stablehlo.subtract"(%0, %6) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %8 = "stablehlo.exponential"(%7) : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %9 = "stablehlo.constant"() {value = dense<0x00000000> : tensor<f32>} : () -> tensor<f32>
    %13 = "stablehlo.reduce"(%8, %9) ({
      ^bb0(%10: tensor<f32>, %11: tensor<f32>):
        %12 = "stablehlo.add"(%10, %11) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%12) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
    %14 = "stablehlo.constant"() {value = dense<0x3F800000> : tensor<f32>} : () -> tensor<f32>
    %15 = "stablehlo.broadcast_in_dim"(%14) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<2xf32>
    %16 = "stablehlo.divide"(%15, %13) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    %17 = "stablehlo.broadcast_in_dim"(%16) {broadcast_dimensions = array<i64: 0>} : (tensor<2xf32>) -> tensor<2x3xf32>
    %18 = "stablehlo.exponential"(%7) : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %19 = "stablehlo.multiply"(%18, %17) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    "func.return"(%19) : (tensor<2x3xf32>) -> ()
  }
}
