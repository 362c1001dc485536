// hetc_hls::max_pool2d / avg_pool2d / global_avg_pool2d against direct loops over the whole
// image: padding (which never wins the max; counted or not in the average), stride 2,
// non-square windows, fixed and float.
#include "kernel_test.h"

template <unsigned H, unsigned W, unsigned C, unsigned KH, unsigned KW, unsigned SH, unsigned SW, unsigned PT,
          unsigned PL, unsigned PB, unsigned PR, bool INCLUDE_PAD, class At>
struct pool_cfg {
    static const unsigned in_height = H, in_width = W, n_chan = C, filt_height = KH, filt_width = KW;
    static const unsigned stride_height = SH, stride_width = SW;
    static const unsigned pad_top = PT, pad_left = PL, pad_bottom = PB, pad_right = PR;
    static const unsigned out_height = (H + PT + PB - KH) / SH + 1, out_width = (W + PL + PR - KW) / SW + 1;
    static const bool count_include_pad = INCLUDE_PAD;
    typedef At accum_t;
};

template <class data_T, class res_T, class C> void check(const char* what, bool is_max, uint64_t seed) {
    kt::Rng rng(seed);
    // negative inputs: a max that let padding (0) win would show
    std::vector<data_T> x = kt::random_vector<data_T>(rng, C::in_height * C::in_width * C::n_chan, -8, 2);
    std::vector<res_T> want;
    for (unsigned oh = 0; oh < C::out_height; oh++) {
        for (unsigned ow = 0; ow < C::out_width; ow++) {
            for (unsigned c = 0; c < C::n_chan; c++) {
                double best = -1e300, sum = 0;
                unsigned n_image = 0, n_padded = 0;
                for (unsigned kh = 0; kh < C::filt_height; kh++) {
                    for (unsigned kw = 0; kw < C::filt_width; kw++) {
                        const int r = int(oh * C::stride_height + kh) - int(C::pad_top);
                        const int col = int(ow * C::stride_width + kw) - int(C::pad_left);
                        n_padded += r < int(C::in_height + C::pad_bottom) && col < int(C::in_width + C::pad_right);
                        if (r < 0 || r >= int(C::in_height) || col < 0 || col >= int(C::in_width)) continue;
                        const double v = (double)x[(r * C::in_width + col) * C::n_chan + c];
                        best = v > best ? v : best;
                        sum += v;
                        n_image++;
                    }
                }
                const unsigned count = C::count_include_pad ? n_padded : n_image;
                want.push_back(is_max ? (res_T)(data_T)best : (res_T)(sum / count));
            }
        }
    }
    hls::stream<data_T> in;
    hls::stream<res_T> out;
    kt::push(in, x);
    if (is_max) hetc_hls::max_pool2d<data_T, res_T, C>(in, out);
    else hetc_hls::avg_pool2d<data_T, res_T, C>(in, out);
    kt::expect(what, in, out, want);
}

template <unsigned H, unsigned W, unsigned C, class At> struct gap_cfg {
    static const unsigned in_height = H, in_width = W, n_chan = C;
    typedef At accum_t;
};

template <class data_T, class res_T, class C> void check_global(const char* what, uint64_t seed) {
    kt::Rng rng(seed);
    std::vector<data_T> x = kt::random_vector<data_T>(rng, C::in_height * C::in_width * C::n_chan, -8, 8);
    std::vector<res_T> want;
    for (unsigned c = 0; c < C::n_chan; c++) {
        double sum = 0;
        for (unsigned p = 0; p < C::in_height * C::in_width; p++) sum += (double)x[p * C::n_chan + c];
        want.push_back((res_T)(sum / (C::in_height * C::in_width)));
    }
    hls::stream<data_T> in;
    hls::stream<res_T> out;
    kt::push(in, x);
    hetc_hls::global_avg_pool2d<data_T, res_T, C>(in, out);
    kt::expect(what, in, out, want);
}

int main() {
    typedef ap_fixed<16, 6> fx;
    typedef ap_fixed<12, 4, AP_RND, AP_SAT> narrow;
    typedef ap_fixed<20, 10> sum9;  // exact sum of 9 fx values
    //                          H  W  C KH KW SH SW PT PL PB PR pad
    check<fx, fx, pool_cfg<6, 7, 3, 2, 2, 2, 2, 0, 0, 0, 0, false, fx> >("max 2x2 s2", true, 1);
    check<fx, narrow, pool_cfg<7, 5, 2, 3, 3, 2, 2, 1, 1, 1, 1, false, fx> >("max 3x3 s2 p1", true, 2);
    check<fx, fx, pool_cfg<5, 6, 3, 3, 2, 1, 2, 1, 0, 1, 1, false, fx> >("max 3x2 s(1,2) asymmetric pads", true, 3);
    check<fx, fx, pool_cfg<6, 7, 3, 3, 3, 2, 2, 1, 1, 1, 1, false, sum9> >("avg 3x3 s2 p1 exclude pad", false, 4);
    check<fx, narrow, pool_cfg<6, 7, 3, 3, 3, 2, 2, 1, 1, 1, 1, true, sum9> >("avg 3x3 s2 p1 include pad", false, 5);
    check<fx, fx, pool_cfg<4, 4, 2, 2, 2, 2, 2, 0, 0, 0, 0, false, ap_fixed<18, 8> > >("avg 2x2 s2", false, 6);
    check<float, float, pool_cfg<7, 5, 2, 3, 3, 2, 2, 1, 1, 1, 1, false, float> >("max float 3x3 s2 p1", true, 7);
    check<float, float, pool_cfg<7, 5, 2, 3, 3, 2, 2, 1, 1, 1, 1, true, float> >("avg float include pad", false, 8);
    check_global<fx, fx, gap_cfg<5, 3, 4, ap_fixed<20, 10> > >("global avg 5x3x4", 9);
    check_global<fx, narrow, gap_cfg<2, 2, 3, ap_fixed<18, 8> > >("global avg narrow result", 10);
    check_global<float, float, gap_cfg<3, 5, 2, float> >("global avg float", 11);
    return kt::report();
}
