// hetc_hls::softmax over the last axis: float results against double math (1e-5 relative),
// fixed results against the kernel's documented float computation cast to res_t.
#include <type_traits>

#include "kernel_test.h"

template <unsigned R, unsigned N> struct sm_cfg {
    static const unsigned n_rows = R, n_in = N;
};

template <class data_T, class res_T, class C> void check(const char* what, double range, uint64_t seed) {
    kt::Rng rng(seed);
    std::vector<data_T> x = kt::random_vector<data_T>(rng, C::n_rows * C::n_in, -range, range);
    std::vector<res_T> want;
    for (unsigned r = 0; r < C::n_rows; r++) {
        const data_T* row = &x[r * C::n_in];
        if (!std::is_same<res_T, float>::value) {  // fixed: the kernel's float steps
            float m = (float)(double)row[0], sum = 0, e[C::n_in];
            for (unsigned i = 1; i < C::n_in; i++) m = std::fmax(m, (float)(double)row[i]);
            for (unsigned i = 0; i < C::n_in; i++) sum += (e[i] = std::exp((float)(double)row[i] - m));
            for (unsigned i = 0; i < C::n_in; i++) want.push_back((res_T)(e[i] / sum));
        } else {
            double sum = 0;
            for (unsigned i = 0; i < C::n_in; i++) sum += std::exp((double)row[i]);
            for (unsigned i = 0; i < C::n_in; i++) want.push_back((res_T)(std::exp((double)row[i]) / sum));
        }
    }
    hls::stream<data_T> in;
    hls::stream<res_T> out;
    kt::push(in, x);
    hetc_hls::softmax<data_T, res_T, C>(in, out);
    kt::expect(what, in, out, want);
}

int main() {
    check<ap_fixed<16, 6>, ap_ufixed<16, 0, AP_RND, AP_SAT>, sm_cfg<3, 7> >("softmax fixed 3x7", 6, 1);
    check<ap_fixed<16, 6>, ap_fixed<18, 8>, sm_cfg<1, 10> >("softmax fixed 1x10", 10, 2);
    check<float, float, sm_cfg<4, 5> >("softmax float 4x5", 8, 3);
    check<float, float, sm_cfg<2, 1> >("softmax float single element", 8, 4);
    check<float, float, sm_cfg<1, 33> >("softmax float large logits", 80, 5);
    return kt::report();
}
