module @torch_tpu {
  func.func public @main(%0: tensor<2x3xf32>, %1: tensor<3x4xf32>) -> (tensor<2x4xf32>) {
    %2 = "stablehlo.reduce_precision"(%0) {exponent_bits = 8 : i32, mantissa_bits = 7 : i32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %3 = "stablehlo.reduce_precision"(%1) {exponent_bits = 8 : i32, mantissa_bits = 7 : i32} : (tensor<3x4xf32>) -> tensor<3x4xf32>
    %4 = "stablehlo.dot_general"(%2, %3) {dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [], rhs_batching_dimensions = [], lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
    "func.return"(%4) : (tensor<2x4xf32>) -> ()
  }
}
