module @torch_tpu {
  func.func public @main(%0: tensor<3x4xf32>, %1: tensor<3x2xi64>) -> (tensor<3x2xf32>) {
    %2 = "stablehlo.iota"() {iota_dimension = 0 : i64} : () -> tensor<3x2xi64>
    %3 = "stablehlo.reshape"(%2) : (tensor<3x2xi64>) -> tensor<3x2x1xi64>
    %4 = "stablehlo.constant"() {value = dense<4> : tensor<i64>} : () -> tensor<i64>
    %5 = "stablehlo.broadcast_in_dim"(%4) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<3x2xi64>
    %6 = "stablehlo.compare"(%1, %5) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<3x2xi64>, tensor<3x2xi64>) -> tensor<3x2xi1>
    %7 = "stablehlo.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
    %8 = "stablehlo.broadcast_in_dim"(%7) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<3x2xi64>
    %9 = "stablehlo.compare"(%1, %8) {comparison_direction = #stablehlo<comparison_direction GE>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<3x2xi64>, tensor<3x2xi64>) -> tensor<3x2xi1>
    %10 = "stablehlo.and"(%9, %6) : (tensor<3x2xi1>, tensor<3x2xi1>) -> tensor<3x2xi1>
    %11 = "stablehlo.not"(%10) : (tensor<3x2xi1>) -> tensor<3x2xi1>
    %12 = "stablehlo.constant"() {value = dense<false> : tensor<i1>} : () -> tensor<i1>
    %16 = "stablehlo.reduce"(%11, %12) ({
      ^bb0(%13: tensor<i1>, %14: tensor<i1>):
        %15 = "stablehlo.or"(%13, %14) : (tensor<i1>, tensor<i1>) -> tensor<i1>
        "stablehlo.return"(%15) : (tensor<i1>) -> ()
    }) {dimensions = array<i64: 0, 1>} : (tensor<3x2xi1>, tensor<i1>) -> tensor<i1>
    %17 = "stablehlo.compare"(%1, %8) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<3x2xi64>, tensor<3x2xi64>) -> tensor<3x2xi1>
    %18 = "stablehlo.add"(%1, %5) : (tensor<3x2xi64>, tensor<3x2xi64>) -> tensor<3x2xi64>
    %19 = "stablehlo.select"(%17, %18, %1) : (tensor<3x2xi1>, tensor<3x2xi64>, tensor<3x2xi64>) -> tensor<3x2xi64>
    %20 = "stablehlo.reshape"(%19) : (tensor<3x2xi64>) -> tensor<3x2x1xi64>
    %21 = "stablehlo.concatenate"(%3, %20) {dimension = 2 : i64} : (tensor<3x2x1xi64>, tensor<3x2x1xi64>) -> tensor<3x2x2xi64>
    %22 = "stablehlo.gather"(%0, %21) {dimension_numbers = #stablehlo.gather<offset_dims = [], collapsed_slice_dims = [0, 1], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [0, 1], index_vector_dim = 2>, slice_sizes = array<i64: 1, 1>, indices_are_sorted = false} : (tensor<3x4xf32>, tensor<3x2x2xi64>) -> tensor<3x2xf32>
    "func.return"(%22) : (tensor<3x2xf32>) -> ()
  }
}
