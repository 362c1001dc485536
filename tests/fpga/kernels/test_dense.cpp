// hetc_hls::dense against a plain-loop reference and against hls4ml's nnet::dense_latency (the
// two must agree bit for bit on equal types): odd sizes, several rows, saturating/rounding and
// wrapping accumulators, reuse > 1, float.
#include "kernel_test.h"
#include "nnet_utils/nnet_dense_latency.h"

template <unsigned ROWS, unsigned IN, unsigned OUT, class W, class B, class A, unsigned REUSE = 1> struct dense_cfg {
    static const unsigned n_rows = ROWS, n_in = IN, n_out = OUT, reuse = REUSE;
    static const unsigned multiplier_limit = hetc_hls::ceil_div(IN * OUT, REUSE);
    static const unsigned weight_partition = multiplier_limit;
    typedef W weight_t;
    typedef B bias_t;
    typedef A accum_t;
    // hls4ml's names, for nnet::dense_latency
    static const unsigned reuse_factor = REUSE;
    template <class x_T, class y_T> using product = nnet::product::mult<x_T, y_T>;
};

template <class data_T, class res_T, class C>
void check(const char* what, bool against_hls4ml, uint64_t seed, double range) {
    kt::Rng rng(seed);
    std::vector<data_T> x = kt::random_vector<data_T>(rng, C::n_rows * C::n_in, -range, range);
    std::vector<typename C::weight_t> w = kt::random_vector<typename C::weight_t>(rng, C::n_in * C::n_out, -1.5, 1.5);
    std::vector<typename C::bias_t> b = kt::random_vector<typename C::bias_t>(rng, C::n_out, -1, 1);

    std::vector<res_T> want(C::n_rows * C::n_out);
    for (unsigned r = 0; r < C::n_rows; r++) {
        for (unsigned j = 0; j < C::n_out; j++) {
            typename C::accum_t acc = (typename C::accum_t)b[j];
            for (unsigned i = 0; i < C::n_in; i++) {
                acc += (typename C::accum_t)(x[r * C::n_in + i] * w[i * C::n_out + j]);
            }
            want[r * C::n_out + j] = (res_T)acc;
        }
    }
    hls::stream<data_T> in;
    hls::stream<res_T> out;
    kt::push(in, x);
    hetc_hls::dense<data_T, res_T, C>(in, out, w.data(), b.data());
    kt::expect(what, in, out, want);

    if (against_hls4ml) {
        std::vector<res_T> theirs(C::n_rows * C::n_out);
        for (unsigned r = 0; r < C::n_rows; r++) {
            nnet::dense_latency<data_T, res_T, C>(&x[r * C::n_in], &theirs[r * C::n_out], w.data(), b.data());
        }
        kt::checks++;
        for (size_t k = 0; k < theirs.size(); k++) {
            if (!(theirs[k] == want[k])) {
                std::printf("FAIL %s: hls4ml gives %.9g at %zu, hetc %.9g\n", what, (double)theirs[k], k, (double)want[k]);
                kt::failures++;
                return;
            }
        }
        std::printf("ok   %s == nnet::dense_latency\n", what);
    }
}

int main() {
    typedef ap_fixed<16, 6> fx16;
    check<fx16, fx16, dense_cfg<3, 7, 5, ap_fixed<12, 4>, ap_fixed<10, 3>, ap_fixed<32, 12> > >(
        "dense fixed 3x7->5", true, 1, 4.0);
    check<fx16, ap_fixed<8, 3, AP_RND_CONV, AP_SAT>,
          dense_cfg<2, 9, 3, ap_fixed<8, 2, AP_RND>, ap_fixed<8, 2>, ap_fixed<14, 4, AP_RND, AP_SAT> > >(
        "dense fixed saturating accumulator", true, 2, 8.0);
    // few fractional bits and round-half-even: products often tie, so the product must be cast to
    // accum_t before it is added (rounding acc + x * w at once gives other results)
    check<ap_fixed<8, 4>, ap_fixed<8, 4>, dense_cfg<3, 13, 5, ap_fixed<6, 3>, ap_fixed<6, 3>, ap_fixed<10, 5, AP_RND_CONV, AP_SAT> > >(
        "dense fixed round-half-even accumulator", true, 7, 6.0);
    check<fx16, fx16, dense_cfg<1, 11, 6, ap_fixed<12, 4>, ap_fixed<10, 3>, ap_fixed<12, 3> > >(
        "dense fixed wrapping accumulator", true, 3, 8.0);
    check<fx16, fx16, dense_cfg<3, 7, 5, ap_fixed<12, 4>, ap_fixed<10, 3>, ap_fixed<32, 12>, 4> >(
        "dense fixed reuse 4", true, 1, 4.0);
    check<ap_ufixed<8, 4>, ap_fixed<18, 8>, dense_cfg<2, 5, 7, ap_fixed<6, 1>, ap_fixed<6, 1>, ap_fixed<24, 10> > >(
        "dense unsigned input", true, 4, 10.0);
    check<float, float, dense_cfg<2, 9, 4, float, float, float> >("dense float 2x9->4", true, 5, 3.0);
    check<float, float, dense_cfg<1, 1, 1, float, float, float> >("dense float 1x1->1", false, 6, 3.0);
    return kt::report();
}
