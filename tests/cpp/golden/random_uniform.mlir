module @torch_tpu {
  func.func public @main(%0: tensor<4xf32>, %1: tensor<ui64>, %2: tensor<ui64>) -> (tensor<4xf32>) {
    %3 = "stablehlo.reshape"(%1) : (tensor<ui64>) -> tensor<1xui64>
    %4 = "stablehlo.reshape"(%2) : (tensor<ui64>) -> tensor<1xui64>
    %5 = "stablehlo.concatenate"(%3, %4) {dimension = 0 : i64} : (tensor<1xui64>, tensor<1xui64>) -> tensor<2xui64>
    %6, %7 = "stablehlo.rng_bit_generator"(%5) {rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>} : (tensor<2xui64>) -> (tensor<2xui64>, tensor<1xui64>)
    %8 = "stablehlo.constant"() {value = dense<0> : tensor<ui64>} : () -> tensor<ui64>
    %9 = "stablehlo.reshape"(%8) : (tensor<ui64>) -> tensor<1xui64>
    %10 = "stablehlo.concatenate"(%7, %9) {dimension = 0 : i64} : (tensor<1xui64>, tensor<1xui64>) -> tensor<2xui64>
    %11, %12 = "stablehlo.rng_bit_generator"(%10) {rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>} : (tensor<2xui64>) -> (tensor<2xui64>, tensor<1x4xui64>)
    %13 = "stablehlo.reshape"(%12) : (tensor<1x4xui64>) -> tensor<4xui64>
    %14 = "stablehlo.constant"() {value = dense<40> : tensor<ui64>} : () -> tensor<ui64>
    %15 = "stablehlo.broadcast_in_dim"(%14) {broadcast_dimensions = array<i64>} : (tensor<ui64>) -> tensor<4xui64>
    %16 = "stablehlo.shift_right_logical"(%13, %15) : (tensor<4xui64>, tensor<4xui64>) -> tensor<4xui64>
    %17 = "stablehlo.convert"(%16) : (tensor<4xui64>) -> tensor<4xf32>
    %18 = "stablehlo.constant"() {value = dense<0x33800000> : tensor<f32>} : () -> tensor<f32>
    %19 = "stablehlo.broadcast_in_dim"(%18) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %20 = "stablehlo.multiply"(%17, %19) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %21 = "stablehlo.constant"() {value = dense<0x00000000> : tensor<f32>} : () -> tensor<f32>
    %22 = "stablehlo.broadcast_in_dim"(%21) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %23 = "stablehlo.constant"() {value = dense<0x3F800000> : tensor<f32>} : () -> tensor<f32>
    %24 = "stablehlo.broadcast_in_dim"(%23) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %25 = "stablehlo.multiply"(%20, %24) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %26 = "stablehlo.add"(%25, %22) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %27 = "stablehlo.compare"(%26, %24) {comparison_direction = #stablehlo<comparison_direction GE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %28 = "stablehlo.select"(%27, %22, %26) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%28) : (tensor<4xf32>) -> ()
  }
}
