module @torch_tpu {
  func.func public @main(%0: tensor<1x1x4x4xf32>) -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>) {
    %1 = "stablehlo.iota"() {iota_dimension = 0 : i64} : () -> tensor<16xi64>
    %2 = "stablehlo.reshape"(%1) : (tensor<16xi64>) -> tensor<4x4xi64>
    %3 = "stablehlo.broadcast_in_dim"(%2) {broadcast_dimensions = array<i64: 2, 3>} : (tensor<4x4xi64>) -> tensor<1x1x4x4xi64>
    %4 = "stablehlo.constant"() {value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>
    %5 = "stablehlo.constant"() {value = dense<9223372036854775807> : tensor<i64>} : () -> tensor<i64>
    %24, %25 = "stablehlo.reduce_window"(%0, %3, %4, %5) ({
      ^bb0(%6: tensor<f32>, %7: tensor<i64>, %8: tensor<f32>, %9: tensor<i64>):
        %10 = "stablehlo.compare"(%6, %6) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>
        %11 = "stablehlo.compare"(%8, %8) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>
        %12 = "stablehlo.not"(%10) : (tensor<i1>) -> tensor<i1>
        %13 = "stablehlo.compare"(%9, %7) {comparison_direction = #stablehlo<comparison_direction GT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<i64>, tensor<i64>) -> tensor<i1>
        %14 = "stablehlo.not"(%13) : (tensor<i1>) -> tensor<i1>
        %15 = "stablehlo.compare"(%8, %6) {comparison_direction = #stablehlo<comparison_direction EQ>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>
        %16 = "stablehlo.and"(%15, %14) : (tensor<i1>, tensor<i1>) -> tensor<i1>
        %17 = "stablehlo.compare"(%8, %6) {comparison_direction = #stablehlo<comparison_direction GT>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>
        %18 = "stablehlo.or"(%17, %16) : (tensor<i1>, tensor<i1>) -> tensor<i1>
        %19 = "stablehlo.and"(%12, %18) : (tensor<i1>, tensor<i1>) -> tensor<i1>
        %20 = "stablehlo.or"(%12, %13) : (tensor<i1>, tensor<i1>) -> tensor<i1>
        %21 = "stablehlo.select"(%11, %20, %19) : (tensor<i1>, tensor<i1>, tensor<i1>) -> tensor<i1>
        %22 = "stablehlo.select"(%21, %8, %6) : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
        %23 = "stablehlo.select"(%21, %9, %7) : (tensor<i1>, tensor<i64>, tensor<i64>) -> tensor<i64>
        "stablehlo.return"(%22, %23) : (tensor<f32>, tensor<i64>) -> ()
    }) {window_dimensions = array<i64: 1, 1, 2, 2>, window_strides = array<i64: 1, 1, 2, 2>, window_dilations = array<i64: 1, 1, 1, 1>, padding = dense<[[0, 0], [0, 0], [0, 0], [0, 0]]> : tensor<4x2xi64>} : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xi64>, tensor<f32>, tensor<i64>) -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>)
    "func.return"(%24, %25) : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>) -> ()
  }
}
