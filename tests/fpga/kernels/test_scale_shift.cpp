// hetc_hls::scale_shift (folded batch norm) against a plain loop and hls4ml's nnet::normalize.
#include "kernel_test.h"
#include "nnet_utils/nnet_batchnorm.h"

template <unsigned N, unsigned C, class W, class B> struct ss_cfg {
    static const unsigned n_elem = N, n_chan = C;
    typedef W weight_t;
    typedef B bias_t;
    // hls4ml's names, for nnet::normalize
    static const unsigned n_in = N, n_filt = C, n_scale_bias = C, reuse_factor = 1, multiplier_limit = N;
    typedef W scale_t;
    template <class x_T, class y_T> using product = nnet::product::mult<x_T, y_T>;
};

template <class data_T, class res_T, class C> void check(const char* what, uint64_t seed) {
    kt::Rng rng(seed);
    std::vector<data_T> x = kt::random_vector<data_T>(rng, C::n_elem, -6, 6);
    std::vector<typename C::weight_t> scale = kt::random_vector<typename C::weight_t>(rng, C::n_chan, -2, 2);
    std::vector<typename C::bias_t> shift = kt::random_vector<typename C::bias_t>(rng, C::n_chan, -1, 1);
    std::vector<res_T> want;
    for (unsigned i = 0; i < C::n_elem; i++) {
        want.push_back((res_T)(x[i] * scale[i % C::n_chan] + shift[i % C::n_chan]));
    }
    hls::stream<data_T> in;
    hls::stream<res_T> out;
    kt::push(in, x);
    hetc_hls::scale_shift<data_T, res_T, C>(in, out, scale.data(), shift.data());
    kt::expect(what, in, out, want);

    std::vector<res_T> theirs(C::n_elem);
    nnet::normalize<data_T, res_T, C>(x.data(), theirs.data(), scale.data(), shift.data());
    kt::checks++;
    for (unsigned i = 0; i < C::n_elem; i++) {
        if (!(theirs[i] == want[i])) {
            std::printf("FAIL %s: nnet::normalize differs at %u\n", what, i);
            kt::failures++;
            return;
        }
    }
    std::printf("ok   %s == nnet::normalize\n", what);
}

int main() {
    typedef ap_fixed<16, 6> fx;
    check<fx, fx, ss_cfg<3 * 4 * 5, 5, ap_fixed<12, 3>, ap_fixed<10, 2> > >("scale_shift fixed (3,4,5)", 1);
    check<fx, ap_fixed<8, 3, AP_RND, AP_SAT>, ss_cfg<21, 7, ap_fixed<10, 3>, ap_fixed<10, 2> > >(
        "scale_shift saturating result", 2);
    check<float, float, ss_cfg<24, 3, float, float> >("scale_shift float", 3);
    return kt::report();
}
