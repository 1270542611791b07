module @torch_tpu {
  func.func public @main(%0: tensor<1x2x5x5xf32>, %1: tensor<3x2x3x3xf32>) -> (tensor<1x3x3x3xf32>) {
    %2 = "stablehlo.reduce_precision"(%0) {exponent_bits = 8 : i32, mantissa_bits = 7 : i32} : (tensor<1x2x5x5xf32>) -> tensor<1x2x5x5xf32>
    %3 = "stablehlo.reduce_precision"(%1) {exponent_bits = 8 : i32, mantissa_bits = 7 : i32} : (tensor<3x2x3x3xf32>) -> tensor<3x2x3x3xf32>
    %4 = "stablehlo.convolution"(%2, %3) {dimension_numbers = #stablehlo.conv<[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]>, feature_group_count = 1 : i64, batch_group_count = 1 : i64, window_strides = array<i64: 1, 1>, padding = dense<[[0, 0], [0, 0]]> : tensor<2x2xi64>, rhs_dilation = array<i64: 1, 1>} : (tensor<1x2x5x5xf32>, tensor<3x2x3x3xf32>) -> tensor<1x3x3x3xf32>
    "func.return"(%4) : (tensor<1x3x3x3xf32>) -> ()
  }
}
