module @torch_tpu {
  func.func public @main(%0: tensor<3x3xf32>) -> (tensor<f32>) {
    %1 = "stablehlo.iota"() {iota_dimension = 1 : i64} : () -> tensor<3x3xi64>
    %2 = "stablehlo.iota"() {iota_dimension = 0 : i64} : () -> tensor<3x3xi64>
    %3 = "stablehlo.compare"(%2, %1) {comparison_direction = #stablehlo<comparison_direction EQ>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<3x3xi64>, tensor<3x3xi64>) -> tensor<3x3xi1>
    %4 = "stablehlo.constant"() {value = dense<0x00000000> : tensor<f32>} : () -> tensor<f32>
    %5 = "stablehlo.broadcast_in_dim"(%4) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<3x3xf32>
    %6 = "stablehlo.select"(%3, %0, %5) : (tensor<3x3xi1>, tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
    %10 = "stablehlo.reduce"(%6, %4) ({
      ^bb0(%7: tensor<f32>, %8: tensor<f32>):
        %9 = "stablehlo.add"(%7, %8) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%9) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 0, 1>} : (tensor<3x3xf32>, tensor<f32>) -> tensor<f32>
    "func.return"(%10) : (tensor<f32>) -> ()
  }
}
