module @torch_tpu {
  func.func public @main(%0: tensor<4x3xf32>, %1: tensor<2xi64>) -> (tensor<2x3xf32>) {
    %2 = "stablehlo.constant"() {value = dense<4> : tensor<i64>} : () -> tensor<i64>
    %3 = "stablehlo.broadcast_in_dim"(%2) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<2xi64>
    %4 = "stablehlo.compare"(%1, %3) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi1>
    %5 = "stablehlo.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
    %6 = "stablehlo.broadcast_in_dim"(%5) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<2xi64>
    %7 = "stablehlo.compare"(%1, %6) {comparison_direction = #stablehlo<comparison_direction GE>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi1>
    %8 = "stablehlo.and"(%7, %4) : (tensor<2xi1>, tensor<2xi1>) -> tensor<2xi1>
    %9 = "stablehlo.not"(%8) : (tensor<2xi1>) -> tensor<2xi1>
    %10 = "stablehlo.constant"() {value = dense<false> : tensor<i1>} : () -> tensor<i1>
    %14 = "stablehlo.reduce"(%9, %10) ({
      ^bb0(%11: tensor<i1>, %12: tensor<i1>):
        %13 = "stablehlo.or"(%11, %12) : (tensor<i1>, tensor<i1>) -> tensor<i1>
        "stablehlo.return"(%13) : (tensor<i1>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<2xi1>, tensor<i1>) -> tensor<i1>
    %15 = "stablehlo.compare"(%1, %3) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi1>
    %16 = "stablehlo.constant"() {value = dense<-4> : tensor<i64>} : () -> tensor<i64>
    %17 = "stablehlo.broadcast_in_dim"(%16) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<2xi64>
    %18 = "stablehlo.compare"(%1, %17) {comparison_direction = #stablehlo<comparison_direction GE>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi1>
    %19 = "stablehlo.and"(%18, %15) : (tensor<2xi1>, tensor<2xi1>) -> tensor<2xi1>
    %20 = "stablehlo.not"(%19) : (tensor<2xi1>) -> tensor<2xi1>
    %24 = "stablehlo.reduce"(%20, %10) ({
      ^bb0(%21: tensor<i1>, %22: tensor<i1>):
        %23 = "stablehlo.or"(%21, %22) : (tensor<i1>, tensor<i1>) -> tensor<i1>
        "stablehlo.return"(%23) : (tensor<i1>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<2xi1>, tensor<i1>) -> tensor<i1>
    %25 = "stablehlo.compare"(%1, %6) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi1>
    %26 = "stablehlo.add"(%1, %3) : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
    %27 = "stablehlo.select"(%25, %26, %1) : (tensor<2xi1>, tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
    %28 = "stablehlo.reshape"(%27) : (tensor<2xi64>) -> tensor<2x1xi64>
    %29 = "stablehlo.gather"(%0, %28) {dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 3>, indices_are_sorted = false} : (tensor<4x3xf32>, tensor<2x1xi64>) -> tensor<2x3xf32>
    "func.return"(%29) : (tensor<2x3xf32>) -> ()
  }
}
