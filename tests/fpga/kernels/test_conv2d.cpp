// hetc_hls::conv2d against a direct convolution over the whole image: 3x3 with padding, stride
// 2 with asymmetric padding, 1x1 (pointwise path and strided window path), depthwise with and
// without a channel multiplier, non-square kernels, stride larger than the kernel, reuse > 1,
// fixed (saturating and wrapping accumulators) and float.
#include "kernel_test.h"

template <unsigned H, unsigned W, unsigned C, unsigned KH, unsigned KW, unsigned F, unsigned SH, unsigned SW,
          unsigned PT, unsigned PL, unsigned PB, unsigned PR, unsigned G, class Wt, class Bt, class At,
          unsigned REUSE = 1>
struct conv_cfg {
    static const unsigned in_height = H, in_width = W, n_chan = C, filt_height = KH, filt_width = KW, n_filt = F;
    static const unsigned stride_height = SH, stride_width = SW, groups = G;
    static const unsigned pad_top = PT, pad_left = PL, pad_bottom = PB, pad_right = PR;
    static const unsigned out_height = (H + PT + PB - KH) / SH + 1, out_width = (W + PL + PR - KW) / SW + 1;
    static const unsigned reuse = REUSE;
    static const unsigned multiplier_limit = hetc_hls::ceil_div(KH * KW * C / G * F, REUSE);
    static const unsigned weight_partition = multiplier_limit;
    typedef Wt weight_t;
    typedef Bt bias_t;
    typedef At accum_t;
};

template <class data_T, class res_T, class C> void check(const char* what, uint64_t seed) {
    typedef typename C::accum_t acc_t;
    const unsigned cg = C::n_chan / C::groups, fg = C::n_filt / C::groups;
    kt::Rng rng(seed);
    std::vector<data_T> x = kt::random_vector<data_T>(rng, C::in_height * C::in_width * C::n_chan, -4, 4);
    std::vector<typename C::weight_t> w =
        kt::random_vector<typename C::weight_t>(rng, C::filt_height * C::filt_width * cg * C::n_filt, -1, 1);
    std::vector<typename C::bias_t> b = kt::random_vector<typename C::bias_t>(rng, C::n_filt, -1, 1);

    std::vector<res_T> want(C::out_height * C::out_width * C::n_filt);
    for (unsigned oh = 0; oh < C::out_height; oh++) {
        for (unsigned ow = 0; ow < C::out_width; ow++) {
            for (unsigned f = 0; f < C::n_filt; f++) {
                const unsigned g = f / fg;
                acc_t acc = (acc_t)b[f];
                for (unsigned kh = 0; kh < C::filt_height; kh++) {
                    for (unsigned kw = 0; kw < C::filt_width; kw++) {
                        for (unsigned c = 0; c < cg; c++) {
                            const int r = int(oh * C::stride_height + kh) - int(C::pad_top);
                            const int col = int(ow * C::stride_width + kw) - int(C::pad_left);
                            const bool inside = r >= 0 && r < int(C::in_height) && col >= 0 && col < int(C::in_width);
                            const data_T v = inside ? x[(r * C::in_width + col) * C::n_chan + g * cg + c] : data_T(0);
                            acc += (acc_t)(v * w[((kh * C::filt_width + kw) * cg + c) * C::n_filt + f]);
                        }
                    }
                }
                want[(oh * C::out_width + ow) * C::n_filt + f] = (res_T)acc;
            }
        }
    }
    hls::stream<data_T> in;
    hls::stream<res_T> out;
    kt::push(in, x);
    hetc_hls::conv2d<data_T, res_T, C>(in, out, w.data(), b.data());
    kt::expect(what, in, out, want);
}

int main() {
    typedef ap_fixed<16, 6> fx;
    typedef ap_fixed<10, 3> wt;
    typedef ap_fixed<32, 12> acc;
    //                       H  W  C KH KW  F SH SW PT PL PB PR G
    check<fx, fx, conv_cfg<5, 6, 3, 3, 3, 4, 1, 1, 1, 1, 1, 1, 1, wt, wt, acc> >("conv 3x3 s1 p1", 1);
    check<fx, fx, conv_cfg<7, 5, 2, 3, 3, 3, 2, 2, 1, 0, 1, 2, 1, wt, wt, acc> >("conv 3x3 s2 asymmetric pads", 2);
    check<fx, fx, conv_cfg<3, 4, 5, 1, 1, 3, 1, 1, 0, 0, 0, 0, 1, wt, wt, acc> >("conv 1x1 pointwise", 3);
    check<fx, fx, conv_cfg<5, 5, 3, 1, 1, 2, 2, 2, 0, 0, 0, 0, 1, wt, wt, acc> >("conv 1x1 stride 2", 4);
    check<fx, fx, conv_cfg<6, 7, 4, 3, 3, 4, 2, 2, 1, 1, 1, 1, 4, wt, wt, acc> >("conv depthwise 3x3 s2 p1", 5);
    check<fx, fx, conv_cfg<5, 4, 3, 3, 3, 6, 1, 1, 1, 1, 1, 1, 3, wt, wt, acc> >("conv depthwise multiplier 2", 6);
    check<fx, fx, conv_cfg<8, 5, 2, 2, 2, 3, 3, 3, 0, 0, 0, 0, 1, wt, wt, acc> >("conv 2x2 stride 3 (rows skipped)", 7);
    check<fx, fx, conv_cfg<5, 6, 3, 3, 3, 4, 1, 1, 1, 1, 1, 1, 1, wt, wt, acc, 3> >("conv 3x3 reuse 3", 1);
    check<fx, ap_fixed<8, 3, AP_RND, AP_SAT>,
          conv_cfg<4, 4, 3, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, wt, wt, ap_fixed<12, 4, AP_RND_CONV, AP_SAT> > >(
        "conv saturating accumulator", 8);
    check<fx, fx, conv_cfg<4, 4, 3, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, wt, wt, ap_fixed<12, 3> > >("conv wrapping accumulator", 9);
    check<ap_fixed<8, 4>, ap_fixed<8, 4>,
          conv_cfg<4, 5, 3, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, ap_fixed<6, 3>, ap_fixed<6, 3>, ap_fixed<10, 5, AP_RND_CONV> > >(
        "conv round-half-even accumulator (products tie)", 14);
    check<float, float, conv_cfg<5, 6, 3, 3, 3, 4, 1, 1, 1, 1, 1, 1, 1, float, float, float> >("conv float 3x3 s1 p1", 10);
    check<float, float, conv_cfg<7, 6, 2, 5, 3, 3, 2, 1, 2, 1, 2, 1, 1, float, float, float> >("conv float 5x3 s(2,1)", 11);
    check<float, float, conv_cfg<6, 6, 4, 3, 3, 4, 2, 2, 1, 1, 1, 1, 4, float, float, float> >("conv float depthwise s2", 12);
    check<float, float, conv_cfg<3, 3, 4, 1, 1, 5, 1, 1, 0, 0, 0, 0, 1, float, float, float> >("conv float 1x1", 13);
    return kt::report();
}
