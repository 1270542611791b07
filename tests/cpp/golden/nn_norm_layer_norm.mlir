module @torch_tpu {
  func.func public @main(%0: tensor<2x4xf32>, %1: tensor<4xf32>, %2: tensor<4xf32>) -> (tensor<2x4xf32>, tensor<2x1xf32>, tensor<2x1xf32>) {
    %3 = "stablehlo.constant"() {value = dense<0x00000000> : tensor<f32>} : () -> tensor<f32>
    %7 = "stablehlo.reduce"(%0, %3) ({
      ^bb0(%4: tensor<f32>, %5: tensor<f32>):
        %6 = "stablehlo.add"(%4, %5) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%6) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<2x4xf32>, tensor<f32>) -> tensor<2xf32>
    %8 = "stablehlo.constant"() {value = dense<0x40800000> : tensor<f32>} : () -> tensor<f32>
    %9 = "stablehlo.broadcast_in_dim"(%8) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<2xf32>
    %10 = "stablehlo.divide"(%7, %9) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    %11 = "stablehlo.reshape"(%10) : (tensor<2xf32>) -> tensor<2x1xf32>
    %12 = "stablehlo.broadcast_in_dim"(%11) {broadcast_dimensions = array<i64: 0, 1>} : (tensor<2x1xf32>) -> tensor<2x4xf32>
    %13 = "stablehlo.subtract"(%0, %12) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %14 = "stablehlo.multiply"(%13, %13) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %18 = "stablehlo.reduce"(%14, %3) ({
      ^bb0(%15: tensor<f32>, %16: tensor<f32>):
        %17 = "stablehlo.add"(%15, %16) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%17) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<2x4xf32>, tensor<f32>) -> tensor<2xf32>
    %19 = "stablehlo.divide"(%18, %9) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    %20 = "stablehlo.reshape"(%19) : (tensor<2xf32>) -> tensor<2x1xf32>
    %21 = "stablehlo.constant"() {value = dense<0x3727C5AC> : tensor<f32>} : () -> tensor<f32>
    %22 = "stablehlo.broadcast_in_dim"(%21) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<2x1xf32>
    %23 = "stablehlo.add"(%20, %22) : (tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x1xf32>
    %24 = "stablehlo.sqrt"(%23) : (tensor<2x1xf32>) -> tensor<2x1xf32>
    %25 = "stablehlo.constant"() {value = dense<0x7FC00000> : tensor<f32>} : () -> tensor<f32>
    %26 = "stablehlo.broadcast_in_dim"(%25) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<2x1xf32>
    %27 = "stablehlo.compare"(%24, %24) {comparison_direction = #stablehlo<comparison_direction EQ>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x1xi1>
    %28 = "stablehlo.select"(%27, %24, %26) : (tensor<2x1xi1>, tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x1xf32>
    %29 = "stablehlo.constant"() {value = dense<0x3F800000> : tensor<f32>} : () -> tensor<f32>
    %30 = "stablehlo.broadcast_in_dim"(%29) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<2x1xf32>
    %31 = "stablehlo.divide"(%30, %28) : (tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x1xf32>
    %32 = "stablehlo.broadcast_in_dim"(%31) {broadcast_dimensions = array<i64: 0, 1>} : (tensor<2x1xf32>) -> tensor<2x4xf32>
    %33 = "stablehlo.broadcast_in_dim"(%11) {broadcast_dimensions = array<i64: 0, 1>} : (tensor<2x1xf32>) -> tensor<2x4xf32>
    %34 = "stablehlo.subtract"(%0, %33) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %35 = "stablehlo.multiply"(%34, %32) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %36 = "stablehlo.broadcast_in_dim"(%2) {broadcast_dimensions = array<i64: 1>} : (tensor<4xf32>) -> tensor<2x4xf32>
    %37 = "stablehlo.broadcast_in_dim"(%1) {broadcast_dimensions = array<i64: 1>} : (tensor<4xf32>) -> tensor<2x4xf32>
    %38 = "stablehlo.multiply"(%35, %37) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %39 = "stablehlo.add"(%38, %36) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    "func.return"(%39, %11, %31) : (tensor<2x4xf32>, tensor<2x1xf32>, tensor<2x1xf32>) -> ()
  }
}
