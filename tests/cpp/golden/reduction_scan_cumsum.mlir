module @torch_tpu {
  func.func public @main(%0: tensor<5xf32>) -> (tensor<5xf32>) {
    %1 = "stablehlo.constant"() {value = dense<0x00000000> : tensor<f32>} : () -> tensor<f32>
    %2 = "stablehlo.pad"(%0, %1) {edge_padding_low = array<i64: 1>, edge_padding_high = array<i64: -1>, interior_padding = array<i64: 0>} : (tensor<5xf32>, tensor<f32>) -> tensor<5xf32>
    %3 = "stablehlo.add"(%2, %0) : (tensor<5xf32>, tensor<5xf32>) -> tensor<5xf32>
    %4 = "stablehlo.pad"(%3, %1) {edge_padding_low = array<i64: 2>, edge_padding_high = array<i64: -2>, interior_padding = array<i64: 0>} : (tensor<5xf32>, tensor<f32>) -> tensor<5xf32>
    %5 = "stablehlo.add"(%4, %3) : (tensor<5xf32>, tensor<5xf32>) -> tensor<5xf32>
    %6 = "stablehlo.pad"(%5, %1) {edge_padding_low = array<i64: 4>, edge_padding_high = array<i64: -4>, interior_padding = array<i64: 0>} : (tensor<5xf32>, tensor<f32>) -> tensor<5xf32>
    %7 = "stablehlo.add"(%6, %5) : (tensor<5xf32>, tensor<5xf32>) -> tensor<5xf32>
    "func.return"(%7) : (tensor<5xf32>) -> ()
  }
}
