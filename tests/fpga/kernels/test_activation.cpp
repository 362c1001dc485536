// hetc_hls element-wise kernels (relu, clip, leaky_relu, sigmoid, tanh, cast) against plain
// loops; relu also against hls4ml's nnet::relu. Fixed-point references do the kernel's casts
// (sigmoid/tanh in float, as documented); float results are compared with double math.
#include <algorithm>

#include "kernel_test.h"
#include "nnet_utils/nnet_activation.h"

template <unsigned N> struct act_cfg {
    static const unsigned n_elem = N, n_in = N;
};
template <unsigned N> struct clip_cfg {
    static const unsigned n_elem = N;
    static constexpr double lo = -1.25, hi = 2.5;
};
template <unsigned N> struct leaky_cfg {
    static const unsigned n_elem = N;
    static constexpr double alpha = 0.1;
};

enum Kind { RELU, CLIP, LEAKY, SIGMOID, TANH, CAST };

template <class res_T> res_T reference(Kind kind, double v, float f) {
    switch (kind) {
    case RELU: return v > 0 ? (res_T)v : (res_T)0;
    case CLIP: return (res_T)std::min(std::max(v, -1.25), 2.5);
    case LEAKY: return (res_T)(v > 0 ? v : v * 0.1);
    case SIGMOID: return (res_T)(1.0f / (1.0f + std::exp(-f)));
    case TANH: return (res_T)std::tanh(f);
    default: return (res_T)v;
    }
}
template <> float reference<float>(Kind kind, double v, float) {  // double math for float results
    switch (kind) {
    case SIGMOID: return (float)(1 / (1 + std::exp(-v)));
    case TANH: return (float)std::tanh(v);
    default: return reference<double>(kind, v, 0);
    }
}

template <class data_T, class res_T> void check(const char* what, Kind kind, uint64_t seed) {
    const unsigned n = 37;
    kt::Rng rng(seed);
    std::vector<data_T> x = kt::random_vector<data_T>(rng, n, -6, 6);
    x[0] = 0;  // relu's boundary
    std::vector<res_T> want;
    for (unsigned i = 0; i < n; i++) want.push_back(reference<res_T>(kind, (double)x[i], (float)(double)x[i]));
    hls::stream<data_T> in;
    hls::stream<res_T> out;
    kt::push(in, x);
    switch (kind) {
    case RELU: hetc_hls::relu<data_T, res_T, act_cfg<n> >(in, out); break;
    case CLIP: hetc_hls::clip<data_T, res_T, clip_cfg<n> >(in, out); break;
    case LEAKY: hetc_hls::leaky_relu<data_T, res_T, leaky_cfg<n> >(in, out); break;
    case SIGMOID: hetc_hls::sigmoid<data_T, res_T, act_cfg<n> >(in, out); break;
    case TANH: hetc_hls::tanh<data_T, res_T, act_cfg<n> >(in, out); break;
    case CAST: hetc_hls::cast<data_T, res_T, act_cfg<n> >(in, out); break;
    }
    kt::expect(what, in, out, want);

    if (kind == RELU) {
        std::vector<res_T> theirs(n);
        nnet::relu<data_T, res_T, act_cfg<n> >(x.data(), theirs.data());
        kt::checks++;
        for (unsigned i = 0; i < n; i++) {
            if (!(theirs[i] == want[i])) {
                std::printf("FAIL %s: nnet::relu differs at %u\n", what, i);
                kt::failures++;
                return;
            }
        }
        std::printf("ok   %s == nnet::relu\n", what);
    }
}

int main() {
    typedef ap_fixed<16, 6> fx;
    typedef ap_fixed<8, 3, AP_RND, AP_SAT> narrow;
    typedef ap_ufixed<8, 2, AP_RND_CONV, AP_SAT> unsigned_narrow;
    check<fx, fx>("relu fixed", RELU, 1);
    check<fx, ap_ufixed<10, 4> >("relu fixed -> ap_ufixed", RELU, 2);
    check<float, float>("relu float", RELU, 3);
    check<fx, narrow>("clip fixed", CLIP, 4);
    check<float, float>("clip float", CLIP, 5);
    check<fx, fx>("leaky_relu fixed", LEAKY, 6);
    check<fx, ap_fixed<10, 4, AP_RND> >("leaky_relu fixed rounding", LEAKY, 7);
    check<float, float>("leaky_relu float", LEAKY, 8);
    check<fx, fx>("sigmoid fixed", SIGMOID, 9);
    check<fx, unsigned_narrow>("sigmoid fixed -> ap_ufixed", SIGMOID, 10);
    check<float, float>("sigmoid float", SIGMOID, 11);
    check<fx, fx>("tanh fixed", TANH, 12);
    check<float, float>("tanh float", TANH, 13);
    check<fx, narrow>("cast fixed -> saturating", CAST, 14);
    check<float, fx>("cast float -> fixed", CAST, 15);
    check<fx, float>("cast fixed -> float", CAST, 16);
    return kt::report();
}
