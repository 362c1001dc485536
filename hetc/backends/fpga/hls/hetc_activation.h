// Element-wise kernels on n_elem scalars: relu, clip, leaky_relu, sigmoid, tanh, and cast (a
// copy into another type: a reshape that changes the type).
//
// CONFIG_T: n_elem; clip: `static constexpr double lo, hi` (may be +-infinity); leaky_relu:
// `static constexpr double alpha` (the emitter writes the float32 value of the attribute).
//   relu:       x > 0 ? res_t(x) : res_t(0)                      (hls4ml's nnet::relu)
//   clip:       res_t of the exact clamp of x to [lo, hi]
//   leaky_relu: x > 0 ? res_t(x) : res_t(double(x) * alpha)
//   sigmoid:    res_t(1 / (1 + exp(-x))) in float
//   tanh:       res_t(tanh(x)) in float
// sigmoid and tanh use <cmath> in float (no lookup table): exact to float rounding, at the
// price of floating-point cores in synthesis.
#ifndef HETC_HLS_ACTIVATION_H_
#define HETC_HLS_ACTIVATION_H_

#include <cmath>

#include "hetc_common.h"

namespace hetc_hls {

// The element-wise driver: out[i] = Fn::apply<res_T>(in[i]).
template <class data_T, class res_T, class CONFIG_T, class Fn>
void elementwise(hls::stream<data_T>& in, hls::stream<res_T>& out) {
    #pragma HLS INLINE
Elements:
    for (unsigned i = 0; i < CONFIG_T::n_elem; i++) {
        #pragma HLS PIPELINE II=1
        out.write(Fn::template apply<res_T>(in.read()));
    }
}

struct CastFn {
    template <class res_T, class T> static res_T apply(const T& x) { return (res_T)x; }
};
struct ReluFn {
    template <class res_T, class T> static res_T apply(const T& x) { return x > 0 ? (res_T)x : (res_T)0; }
};
template <class CONFIG_T> struct ClipFn {
    template <class res_T, class T> static res_T apply(const T& x) {
        const double v = to_double(x), lo = CONFIG_T::lo, hi = CONFIG_T::hi;
        return v < lo ? (res_T)lo : v > hi ? (res_T)hi : (res_T)x;
    }
};
template <class CONFIG_T> struct LeakyReluFn {
    template <class res_T, class T> static res_T apply(const T& x) {
        const double alpha = CONFIG_T::alpha;
        return x > 0 ? (res_T)x : (res_T)(to_double(x) * alpha);
    }
};
struct SigmoidFn {
    template <class res_T, class T> static res_T apply(const T& x) {
        return (res_T)(1.0f / (1.0f + std::exp(-to_float(x))));
    }
};
struct TanhFn {
    template <class res_T, class T> static res_T apply(const T& x) { return (res_T)std::tanh(to_float(x)); }
};

template <class data_T, class res_T, class CONFIG_T> void cast(hls::stream<data_T>& in, hls::stream<res_T>& out) {
    elementwise<data_T, res_T, CONFIG_T, CastFn>(in, out);
}
template <class data_T, class res_T, class CONFIG_T> void relu(hls::stream<data_T>& in, hls::stream<res_T>& out) {
    elementwise<data_T, res_T, CONFIG_T, ReluFn>(in, out);
}
template <class data_T, class res_T, class CONFIG_T> void clip(hls::stream<data_T>& in, hls::stream<res_T>& out) {
    elementwise<data_T, res_T, CONFIG_T, ClipFn<CONFIG_T> >(in, out);
}
template <class data_T, class res_T, class CONFIG_T>
void leaky_relu(hls::stream<data_T>& in, hls::stream<res_T>& out) {
    elementwise<data_T, res_T, CONFIG_T, LeakyReluFn<CONFIG_T> >(in, out);
}
template <class data_T, class res_T, class CONFIG_T> void sigmoid(hls::stream<data_T>& in, hls::stream<res_T>& out) {
    elementwise<data_T, res_T, CONFIG_T, SigmoidFn>(in, out);
}
template <class data_T, class res_T, class CONFIG_T> void tanh(hls::stream<data_T>& in, hls::stream<res_T>& out) {
    elementwise<data_T, res_T, CONFIG_T, TanhFn>(in, out);
}

} // namespace hetc_hls

#endif
