module @torch_tpu {
  func.func public @main(%0: tensor<1x1x2x2xf32>) -> (tensor<1x1x4x4xf32>) {
    %1 = "stablehlo.iota"() {iota_dimension = 0 : i64} : () -> tensor<4xi64>
    %2 = "stablehlo.constant"() {value = dense<1> : tensor<i64>} : () -> tensor<i64>
    %3 = "stablehlo.broadcast_in_dim"(%2) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<4xi64>
    %4 = "stablehlo.shift_right_arithmetic"(%1, %3) : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
    %5 = "stablehlo.reshape"(%4) : (tensor<4xi64>) -> tensor<4x1xi64>
    %6 = "stablehlo.gather"(%0, %5) {dimension_numbers = #stablehlo.gather<offset_dims = [0, 1, 2], collapsed_slice_dims = [3], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [3], index_vector_dim = 1>, slice_sizes = array<i64: 1, 1, 2, 1>, indices_are_sorted = false} : (tensor<1x1x2x2xf32>, tensor<4x1xi64>) -> tensor<1x1x2x4xf32>
    %7 = "stablehlo.iota"() {iota_dimension = 0 : i64} : () -> tensor<4xi64>
    %8 = "stablehlo.shift_right_arithmetic"(%7, %3) : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
    %9 = "stablehlo.reshape"(%8) : (tensor<4xi64>) -> tensor<4x1xi64>
    %10 = "stablehlo.gather"(%6, %9) {dimension_numbers = #stablehlo.gather<offset_dims = [0, 1, 3], collapsed_slice_dims = [2], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [2], index_vector_dim = 1>, slice_sizes = array<i64: 1, 1, 1, 4>, indices_are_sorted = false} : (tensor<1x1x2x4xf32>, tensor<4x1xi64>) -> tensor<1x1x4x4xf32>
    "func.return"(%10) : (tensor<1x1x4x4xf32>) -> ()
  }
}
