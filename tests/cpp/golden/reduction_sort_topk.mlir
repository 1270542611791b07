module @torch_tpu {
  func.func public @main(%0: tensor<5xf32>) -> (tensor<2xf32>, tensor<2xi64>) {
    %1 = "stablehlo.iota"() {iota_dimension = 0 : i64} : () -> tensor<5xi64>
    %12, %13 = "stablehlo.sort"(%0, %1) ({
      ^bb0(%2: tensor<f32>, %3: tensor<f32>, %4: tensor<i64>, %5: tensor<i64>):
        %6 = "stablehlo.compare"(%3, %2) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>
        %7 = "stablehlo.compare"(%2, %2) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>
        %8 = "stablehlo.compare"(%3, %3) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>
        %9 = "stablehlo.not"(%8) : (tensor<i1>) -> tensor<i1>
        %10 = "stablehlo.and"(%9, %7) : (tensor<i1>, tensor<i1>) -> tensor<i1>
        %11 = "stablehlo.or"(%6, %10) : (tensor<i1>, tensor<i1>) -> tensor<i1>
        "stablehlo.return"(%11) : (tensor<i1>) -> ()
    }) {dimension = 0 : i64, is_stable = true} : (tensor<5xf32>, tensor<5xi64>) -> (tensor<5xf32>, tensor<5xi64>)
    %14 = "stablehlo.slice"(%12) {start_indices = array<i64: 0>, limit_indices = array<i64: 2>, strides = array<i64: 1>} : (tensor<5xf32>) -> tensor<2xf32>
    %15 = "stablehlo.slice"(%13) {start_indices = array<i64: 0>, limit_indices = array<i64: 2>, strides = array<i64: 1>} : (tensor<5xi64>) -> tensor<2xi64>
    "func.return"(%14, %15) : (tensor<2xf32>, tensor<2xi64>) -> ()
  }
}
