// hetc_hls::layer_norm over the last axis: float results against double math (1e-5 relative
// to max(|y|, 1)), fixed results against the kernel's documented float computation.
#include "kernel_test.h"

template <unsigned R, unsigned N, class W, class B> struct ln_cfg {
    static const unsigned n_rows = R, n_in = N;
    static constexpr double epsilon = 1e-5;
    typedef W weight_t;
    typedef B bias_t;
};

template <class data_T, class res_T, class C> void check(const char* what, bool float_steps, uint64_t seed) {
    const unsigned n = C::n_in;
    kt::Rng rng(seed);
    std::vector<data_T> x = kt::random_vector<data_T>(rng, C::n_rows * n, -3, 5);
    std::vector<typename C::weight_t> gamma = kt::random_vector<typename C::weight_t>(rng, n, 0.5, 1.5);
    std::vector<typename C::bias_t> beta = kt::random_vector<typename C::bias_t>(rng, n, -0.5, 0.5);
    std::vector<res_T> want;
    for (unsigned r = 0; r < C::n_rows; r++) {
        const data_T* row = &x[r * n];
        if (float_steps) {
            float sum = 0, sq = 0;
            for (unsigned i = 0; i < n; i++) sum += (float)(double)row[i];
            const float mean = sum / n;
            for (unsigned i = 0; i < n; i++) sq += ((float)(double)row[i] - mean) * ((float)(double)row[i] - mean);
            const float inv = 1.0f / std::sqrt(sq / n + (float)C::epsilon);
            for (unsigned i = 0; i < n; i++) {
                want.push_back((res_T)(((float)(double)row[i] - mean) * inv * (float)(double)gamma[i] +
                                       (float)(double)beta[i]));
            }
        } else {
            double sum = 0, sq = 0;
            for (unsigned i = 0; i < n; i++) sum += (double)row[i];
            const double mean = sum / n;
            for (unsigned i = 0; i < n; i++) sq += ((double)row[i] - mean) * ((double)row[i] - mean);
            const double inv = 1 / std::sqrt(sq / n + C::epsilon);
            for (unsigned i = 0; i < n; i++) {
                want.push_back((res_T)(((double)row[i] - mean) * inv * (double)gamma[i] + (double)beta[i]));
            }
        }
    }
    hls::stream<data_T> in;
    hls::stream<res_T> out;
    kt::push(in, x);
    hetc_hls::layer_norm<data_T, res_T, C>(in, out, gamma.data(), beta.data());
    kt::expect(what, in, out, want);
}

int main() {
    typedef ap_fixed<16, 6> fx;
    check<fx, fx, ln_cfg<3, 9, ap_fixed<12, 2>, ap_fixed<12, 2> > >("layer_norm fixed 3x9", true, 1);
    check<fx, ap_fixed<8, 3, AP_RND, AP_SAT>, ln_cfg<2, 16, ap_fixed<10, 2>, ap_fixed<10, 2> > >(
        "layer_norm saturating result", true, 2);
    check<float, float, ln_cfg<4, 7, float, float> >("layer_norm float 4x7", false, 3);
    return kt::report();
}
