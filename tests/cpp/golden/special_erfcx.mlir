module @torch_tpu {
  func.func public @main(%0: tensor<4xf32>) -> (tensor<4xf32>) {
    %1 = "stablehlo.constant"() {value = dense<0x3FC00000> : tensor<f32>} : () -> tensor<f32>
    %2 = "stablehlo.broadcast_in_dim"(%1) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %3 = "stablehlo.compare"(%0, %2) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %4 = "stablehlo.constant"() {value = dense<0x00000000> : tensor<f32>} : () -> tensor<f32>
    %5 = "stablehlo.broadcast_in_dim"(%4) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %6 = "stablehlo.select"(%3, %0, %5) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %7 = "stablehlo.reduce_precision"(%6) {exponent_bits = 8 : i32, mantissa_bits = 11 : i32} : (tensor<4xf32>) -> tensor<4xf32>
    %8 = "stablehlo.add"(%6, %7) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %9 = "stablehlo.subtract"(%6, %7) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %10 = "stablehlo.multiply"(%9, %8) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %11 = "chlo.erfc"(%6) : (tensor<4xf32>) -> tensor<4xf32>
    %12 = "stablehlo.exponential"(%10) : (tensor<4xf32>) -> tensor<4xf32>
    %13 = "stablehlo.multiply"(%7, %7) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %14 = "stablehlo.exponential"(%13) : (tensor<4xf32>) -> tensor<4xf32>
    %15 = "stablehlo.multiply"(%14, %12) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %16 = "stablehlo.multiply"(%15, %11) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %17 = "stablehlo.select"(%3, %2, %0) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %18 = "stablehlo.constant"() {value = dense<0x41800000> : tensor<f32>} : () -> tensor<f32>
    %19 = "stablehlo.broadcast_in_dim"(%18) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %20 = "stablehlo.divide"(%19, %17) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %21 = "stablehlo.add"(%17, %20) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %22 = "stablehlo.constant"() {value = dense<0x41780000> : tensor<f32>} : () -> tensor<f32>
    %23 = "stablehlo.broadcast_in_dim"(%22) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %24 = "stablehlo.divide"(%23, %21) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %25 = "stablehlo.add"(%17, %24) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %26 = "stablehlo.constant"() {value = dense<0x41700000> : tensor<f32>} : () -> tensor<f32>
    %27 = "stablehlo.broadcast_in_dim"(%26) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %28 = "stablehlo.divide"(%27, %25) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %29 = "stablehlo.add"(%17, %28) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %30 = "stablehlo.constant"() {value = dense<0x41680000> : tensor<f32>} : () -> tensor<f32>
    %31 = "stablehlo.broadcast_in_dim"(%30) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %32 = "stablehlo.divide"(%31, %29) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %33 = "stablehlo.add"(%17, %32) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %34 = "stablehlo.constant"() {value = dense<0x41600000> : tensor<f32>} : () -> tensor<f32>
    %35 = "stablehlo.broadcast_in_dim"(%34) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %36 = "stablehlo.divide"(%35, %33) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %37 = "stablehlo.add"(%17, %36) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %38 = "stablehlo.constant"() {value = dense<0x41580000> : tensor<f32>} : () -> tensor<f32>
    %39 = "stablehlo.broadcast_in_dim"(%38) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %40 = "stablehlo.divide"(%39, %37) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %41 = "stablehlo.add"(%17, %40) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %42 = "stablehlo.constant"() {value = dense<0x41500000> : tensor<f32>} : () -> tensor<f32>
    %43 = "stablehlo.broadcast_in_dim"(%42) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %44 = "stablehlo.divide"(%43, %41) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %45 = "stablehlo.add"(%17, %44) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %46 = "stablehlo.constant"() {value = dense<0x41480000> : tensor<f32>} : () -> tensor<f32>
    %47 = "stablehlo.broadcast_in_dim"(%46) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %48 = "stablehlo.divide"(%47, %45) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %49 = "stablehlo.add"(%17, %48) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %50 = "stablehlo.constant"() {value = dense<0x41400000> : tensor<f32>} : () -> tensor<f32>
    %51 = "stablehlo.broadcast_in_dim"(%50) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %52 = "stablehlo.divide"(%51, %49) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %53 = "stablehlo.add"(%17, %52) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %54 = "stablehlo.constant"() {value = dense<0x41380000> : tensor<f32>} : () -> tensor<f32>
    %55 = "stablehlo.broadcast_in_dim"(%54) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %56 = "stablehlo.divide"(%55, %53) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %57 = "stablehlo.add"(%17, %56) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %58 = "stablehlo.constant"() {value = dense<0x41300000> : tensor<f32>} : () -> tensor<f32>
    %59 = "stablehlo.broadcast_in_dim"(%58) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %60 = "stablehlo.divide"(%59, %57) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %61 = "stablehlo.add"(%17, %60) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %62 = "stablehlo.constant"() {value = dense<0x41280000> : tensor<f32>} : () -> tensor<f32>
    %63 = "stablehlo.broadcast_in_dim"(%62) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %64 = "stablehlo.divide"(%63, %61) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %65 = "stablehlo.add"(%17, %64) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %66 = "stablehlo.constant"() {value = dense<0x41200000> : tensor<f32>} : () -> tensor<f32>
    %67 = "stablehlo.broadcast_in_dim"(%66) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %68 = "stablehlo.divide"(%67, %65) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %69 = "stablehlo.add"(%17, %68) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %70 = "stablehlo.constant"() {value = dense<0x41180000> : tensor<f32>} : () -> tensor<f32>
    %71 = "stablehlo.broadcast_in_dim"(%70) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %72 = "stablehlo.divide"(%71, %69) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %73 = "stablehlo.add"(%17, %72) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %74 = "stablehlo.constant"() {value = dense<0x41100000> : tensor<f32>} : () -> tensor<f32>
    %75 = "stablehlo.broadcast_in_dim"(%74) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %76 = "stablehlo.divide"(%75, %73) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %77 = "stablehlo.add"(%17, %76) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %78 = "stablehlo.constant"() {value = dense<0x41080000> : tensor<f32>} : () -> tensor<f32>
    %79 = "stablehlo.broadcast_in_dim"(%78) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %80 = "stablehlo.divide"(%79, %77) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %81 = "stablehlo.add"(%17, %80) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %82 = "stablehlo.constant"() {value = dense<0x41000000> : tensor<f32>} : () -> tensor<f32>
    %83 = "stablehlo.broadcast_in_dim"(%82) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %84 = "stablehlo.divide"(%83, %81) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %85 = "stablehlo.add"(%17, %84) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %86 = "stablehlo.constant"() {value = dense<0x40F00000> : tensor<f32>} : () -> tensor<f32>
    %87 = "stablehlo.broadcast_in_dim"(%86) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %88 = "stablehlo.divide"(%87, %85) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %89 = "stablehlo.add"(%17, %88) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %90 = "stablehlo.constant"() {value = dense<0x40E00000> : tensor<f32>} : () -> tensor<f32>
    %91 = "stablehlo.broadcast_in_dim"(%90) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %92 = "stablehlo.divide"(%91, %89) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %93 = "stablehlo.add"(%17, %92) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %94 = "stablehlo.constant"() {value = dense<0x40D00000> : tensor<f32>} : () -> tensor<f32>
    %95 = "stablehlo.broadcast_in_dim"(%94) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %96 = "stablehlo.divide"(%95, %93) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %97 = "stablehlo.add"(%17, %96) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %98 = "stablehlo.constant"() {value = dense<0x40C00000> : tensor<f32>} : () -> tensor<f32>
    %99 = "stablehlo.broadcast_in_dim"(%98) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %100 = "stablehlo.divide"(%99, %97) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %101 = "stablehlo.add"(%17, %100) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %102 = "stablehlo.constant"() {value = dense<0x40B00000> : tensor<f32>} : () -> tensor<f32>
    %103 = "stablehlo.broadcast_in_dim"(%102) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %104 = "stablehlo.divide"(%103, %101) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %105 = "stablehlo.add"(%17, %104) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %106 = "stablehlo.constant"() {value = dense<0x40A00000> : tensor<f32>} : () -> tensor<f32>
    %107 = "stablehlo.broadcast_in_dim"(%106) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %108 = "stablehlo.divide"(%107, %105) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %109 = "stablehlo.add"(%17, %108) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %110 = "stablehlo.constant"() {value = dense<0x40900000> : tensor<f32>} : () -> tensor<f32>
    %111 = "stablehlo.broadcast_in_dim"(%110) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %112 = "stablehlo.divide"(%111, %109) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %113 = "stablehlo.add"(%17, %112) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %114 = "stablehlo.constant"() {value = dense<0x40800000> : tensor<f32>} : () -> tensor<f32>
    %115 = "stablehlo.broadcast_in_dim"(%114) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %116 = "stablehlo.divide"(%115, %113) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %117 = "stablehlo.add"(%17, %116) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %118 = "stablehlo.constant"() {value = dense<0x40600000> : tensor<f32>} : () -> tensor<f32>
    %119 = "stablehlo.broadcast_in_dim"(%118) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %120 = "stablehlo.divide"(%119, %117) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %121 = "stablehlo.add"(%17, %120) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %122 = "stablehlo.constant"() {value = dense<0x40400000> : tensor<f32>} : () -> tensor<f32>
    %123 = "stablehlo.broadcast_in_dim"(%122) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %124 = "stablehlo.divide"(%123, %121) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %125 = "stablehlo.add"(%17, %124) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %126 = "stablehlo.constant"() {value = dense<0x40200000> : tensor<f32>} : () -> tensor<f32>
    %127 = "stablehlo.broadcast_in_dim"(%126) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %128 = "stablehlo.divide"(%127, %125) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %129 = "stablehlo.add"(%17, %128) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %130 = "stablehlo.constant"() {value = dense<0x40000000> : tensor<f32>} : () -> tensor<f32>
    %131 = "stablehlo.broadcast_in_dim"(%130) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %132 = "stablehlo.divide"(%131, %129) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %133 = "stablehlo.add"(%17, %132) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %134 = "stablehlo.divide"(%2, %133) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %135 = "stablehlo.add"(%17, %134) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %136 = "stablehlo.constant"() {value = dense<0x3F800000> : tensor<f32>} : () -> tensor<f32>
    %137 = "stablehlo.broadcast_in_dim"(%136) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %138 = "stablehlo.divide"(%137, %135) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %139 = "stablehlo.add"(%17, %138) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %140 = "stablehlo.constant"() {value = dense<0x3F000000> : tensor<f32>} : () -> tensor<f32>
    %141 = "stablehlo.broadcast_in_dim"(%140) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %142 = "stablehlo.divide"(%141, %139) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %143 = "stablehlo.add"(%17, %142) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %144 = "stablehlo.constant"() {value = dense<0x3F106EBB> : tensor<f32>} : () -> tensor<f32>
    %145 = "stablehlo.broadcast_in_dim"(%144) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %146 = "stablehlo.divide"(%145, %143) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %147 = "stablehlo.select"(%3, %16, %146) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %148 = "stablehlo.constant"() {value = dense<0x7F800000> : tensor<f32>} : () -> tensor<f32>
    %149 = "stablehlo.broadcast_in_dim"(%148) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %150 = "stablehlo.constant"() {value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>
    %151 = "stablehlo.broadcast_in_dim"(%150) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
    %152 = "stablehlo.compare"(%0, %151) {comparison_direction = #stablehlo<comparison_direction EQ>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %153 = "stablehlo.select"(%152, %149, %147) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%153) : (tensor<4xf32>) -> ()
  }
}
