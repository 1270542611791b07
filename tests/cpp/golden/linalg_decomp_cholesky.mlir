module @torch_tpu {
  func.func public @main(%0: tensor<3x3xf32>) -> (tensor<3x3xf32>, tensor<i32>) {
    %1 = "stablehlo.cholesky"(%0) {lower = true} : (tensor<3x3xf32>) -> tensor<3x3xf32>
    %2 = "stablehlo.constant"() {value = dense<0x00000000> : tensor<f32>} : () -> tensor<f32>
    %3 = "stablehlo.broadcast_in_dim"(%2) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<3x3xf32>
    %4 = "stablehlo.iota"() {iota_dimension = 0 : i64} : () -> tensor<3x3xi32>
    %5 = "stablehlo.iota"() {iota_dimension = 1 : i64} : () -> tensor<3x3xi32>
    %6 = "stablehlo.compare"(%4, %5) {comparison_direction = #stablehlo<comparison_direction GE>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<3x3xi32>, tensor<3x3xi32>) -> tensor<3x3xi1>
    %7 = "stablehlo.select"(%6, %1, %3) : (tensor<3x3xi1>, tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
    %8 = "stablehlo.is_finite"(%7) : (tensor<3x3xf32>) -> tensor<3x3xi1>
    %9 = "stablehlo.not"(%8) : (tensor<3x3xi1>) -> tensor<3x3xi1>
    %10 = "stablehlo.convert"(%9) : (tensor<3x3xi1>) -> tensor<3x3xi32>
    %11 = "stablehlo.constant"() {value = dense<-2147483648> : tensor<i32>} : () -> tensor<i32>
    %15 = "stablehlo.reduce"(%10, %11) ({
      ^bb0(%12: tensor<i32>, %13: tensor<i32>):
        %14 = "stablehlo.maximum"(%12, %13) : (tensor<i32>, tensor<i32>) -> tensor<i32>
        "stablehlo.return"(%14) : (tensor<i32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<3x3xi32>, tensor<i32>) -> tensor<3xi32>
    %16 = "stablehlo.constant"() {value = dense<1> : tensor<i32>} : () -> tensor<i32>
    %17 = "stablehlo.broadcast_in_dim"(%16) {broadcast_dimensions = array<i64>} : (tensor<i32>) -> tensor<3xi32>
    %18 = "stablehlo.iota"() {iota_dimension = 0 : i64} : () -> tensor<3xi32>
    %19 = "stablehlo.add"(%18, %17) : (tensor<3xi32>, tensor<3xi32>) -> tensor<3xi32>
    %20 = "stablehlo.constant"() {value = dense<4> : tensor<i32>} : () -> tensor<i32>
    %21 = "stablehlo.broadcast_in_dim"(%20) {broadcast_dimensions = array<i64>} : (tensor<i32>) -> tensor<3xi32>
    %22 = "stablehlo.convert"(%15) : (tensor<3xi32>) -> tensor<3xi1>
    %23 = "stablehlo.select"(%22, %19, %21) : (tensor<3xi1>, tensor<3xi32>, tensor<3xi32>) -> tensor<3xi32>
    %24 = "stablehlo.constant"() {value = dense<2147483647> : tensor<i32>} : () -> tensor<i32>
    %28 = "stablehlo.reduce"(%23, %24) ({
      ^bb0(%25: tensor<i32>, %26: tensor<i32>):
        %27 = "stablehlo.minimum"(%25, %26) : (tensor<i32>, tensor<i32>) -> tensor<i32>
        "stablehlo.return"(%27) : (tensor<i32>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<3xi32>, tensor<i32>) -> tensor<i32>
    %29 = "stablehlo.constant"() {value = dense<3> : tensor<i32>} : () -> tensor<i32>
    %30 = "stablehlo.compare"(%28, %29) {comparison_direction = #stablehlo<comparison_direction GT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %31 = "stablehlo.constant"() {value = dense<0> : tensor<i32>} : () -> tensor<i32>
    %32 = "stablehlo.select"(%30, %31, %28) : (tensor<i1>, tensor<i32>, tensor<i32>) -> tensor<i32>
    "func.return"(%7, %32) : (tensor<3x3xf32>, tensor<i32>) -> ()
  }
}
