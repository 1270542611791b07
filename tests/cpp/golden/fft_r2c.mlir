module @torch_tpu {
  func.func public @main(%0: tensor<8xf32>) -> (tensor<5xcomplex<f32>>) {
    %1 = "stablehlo.fft"(%0) {fft_length = array<i64: 8>, fft_type = #stablehlo<fft_type RFFT>} : (tensor<8xf32>) -> tensor<5xcomplex<f32>>
    "func.return"(%1) : (tensor<5xcomplex<f32>>) -> ()
  }
}
