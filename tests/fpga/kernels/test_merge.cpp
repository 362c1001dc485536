// hetc_hls::add / multiply (two streams, possibly of different types) and clone against plain
// loops, fixed and float.
#include "kernel_test.h"

template <unsigned N> struct merge_cfg {
    static const unsigned n_elem = N;
};

template <class a_T, class b_T, class res_T> void check(const char* what, bool is_add, uint64_t seed) {
    const unsigned n = 29;
    kt::Rng rng(seed);
    std::vector<a_T> a = kt::random_vector<a_T>(rng, n, -5, 5);
    std::vector<b_T> b = kt::random_vector<b_T>(rng, n, -5, 5);
    std::vector<res_T> want;
    for (unsigned i = 0; i < n; i++) want.push_back(is_add ? (res_T)(a[i] + b[i]) : (res_T)(a[i] * b[i]));
    hls::stream<a_T> in1;
    hls::stream<b_T> in2;
    hls::stream<res_T> out;
    kt::push(in1, a);
    kt::push(in2, b);
    if (is_add) hetc_hls::add<a_T, b_T, res_T, merge_cfg<n> >(in1, in2, out);
    else hetc_hls::multiply<a_T, b_T, res_T, merge_cfg<n> >(in1, in2, out);
    kt::expect(what, in1, out, want);
    if (!in2.empty()) {
        std::printf("FAIL %s: second input not consumed\n", what);
        kt::failures++;
    }
}

template <class T> void check_clone(const char* what) {
    const unsigned n = 17;
    kt::Rng rng(3);
    std::vector<T> x = kt::random_vector<T>(rng, n, -5, 5);
    hls::stream<T> in, out1, out2;
    kt::push(in, x);
    hetc_hls::clone<T, merge_cfg<n> >(in, out1, out2);
    hls::stream<T> none;
    kt::expect(what, in, out1, x);
    kt::expect(what, none, out2, x);
}

int main() {
    typedef ap_fixed<16, 6> fx;
    check<fx, fx, fx>("add fixed", true, 1);
    check<fx, ap_fixed<12, 3>, ap_fixed<10, 4, AP_RND, AP_SAT> >("add mixed fixed types", true, 2);
    check<float, float, float>("add float", true, 3);
    check<fx, fx, fx>("multiply fixed (wraps)", false, 4);
    check<fx, ap_fixed<12, 3>, ap_fixed<14, 6, AP_RND_CONV, AP_SAT> >("multiply mixed fixed types", false, 5);
    check<float, float, float>("multiply float", false, 6);
    check_clone<fx>("clone fixed");
    check_clone<float>("clone float");
    return kt::report();
}
