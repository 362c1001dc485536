// 2-D convolution, (in_height, in_width, n_chan) -> (out_height, out_width, n_filt), channels
// last, any kernel size, stride and padding, groups 1 (regular) or n_chan (depthwise; any
// groups dividing n_chan and n_filt works).
//
// CONFIG_T: the window fields of hetc_window.h, n_filt, groups; reuse (II of the
// multiply-accumulate of one output pixel), multiplier_limit
// (= ceil(filt_height * filt_width * n_chan / groups * n_filt / reuse)), weight_partition;
// weight_t, bias_t, accum_t.
// weights: (filt_height, filt_width, n_chan / groups, n_filt) row-major; biases: (n_filt,).
// Output channel f belongs to group g = f / (n_filt / groups), which reads input channels
// [g * n_chan / groups, (g + 1) * n_chan / groups).
//
// Arithmetic: hls4ml's. For each output, acc = accum_t(bias); then over (kh, kw, c) in weight
// order acc += accum_t(x * w), padding taps contributing x = 0; out = res_t(acc).
//
// A 1x1 convolution with stride 1, no padding and groups 1 is a dense layer on every pixel and
// runs as one (no line buffer); everything else slides a window over a line buffer of
// filt_height rows (hetc_window.h).
#ifndef HETC_HLS_CONV2D_H_
#define HETC_HLS_CONV2D_H_

#include "hetc_common.h"
#include "hetc_window.h"

namespace hetc_hls {

// The multiply-accumulate of one output pixel on its gathered window.
template <class data_T, class res_T, class CONFIG_T>
void conv_mac(const data_T win[window_dims<CONFIG_T>::size], res_T y[CONFIG_T::n_filt],
              const typename CONFIG_T::weight_t weights[], const typename CONFIG_T::bias_t biases[]) {
    #pragma HLS INLINE off
    #pragma HLS PIPELINE II=CONFIG_T::reuse
    #pragma HLS ALLOCATION operation instances=mul limit=CONFIG_T::multiplier_limit
    const unsigned chan_per_group = CONFIG_T::n_chan / CONFIG_T::groups;
    const unsigned filt_per_group = CONFIG_T::n_filt / CONFIG_T::groups;
Filters:
    for (unsigned f = 0; f < CONFIG_T::n_filt; f++) {
        const unsigned first_chan = (f / filt_per_group) * chan_per_group;
        typename CONFIG_T::accum_t acc = (typename CONFIG_T::accum_t)biases[f];
        for (unsigned tap = 0; tap < window_dims<CONFIG_T>::taps; tap++) {
            for (unsigned c = 0; c < chan_per_group; c++) {
                acc += (typename CONFIG_T::accum_t)(win[tap * CONFIG_T::n_chan + first_chan + c] *
                                                    weights[(tap * chan_per_group + c) * CONFIG_T::n_filt + f]);
            }
        }
        y[f] = (res_T)acc;
    }
}

template <class data_T, class res_T, class CONFIG_T> class ConvOp {
  public:
    ConvOp(const typename CONFIG_T::weight_t* weights, const typename CONFIG_T::bias_t* biases)
        : weights_(weights), biases_(biases) {}

    void compute(const data_T win[], const bool inside[], int, int, hls::stream<res_T>& out) {
        #pragma HLS INLINE
        (void)inside;  // padding taps are already 0 in win
        res_T y[CONFIG_T::n_filt];
        #pragma HLS ARRAY_PARTITION variable=y complete
        conv_mac<data_T, res_T, CONFIG_T>(win, y, weights_, biases_);
    WritePixel:
        for (unsigned f = 0; f < CONFIG_T::n_filt; f++) {
            #pragma HLS PIPELINE II=1
            out.write(y[f]);
        }
    }

  private:
    const typename CONFIG_T::weight_t* weights_;
    const typename CONFIG_T::bias_t* biases_;
};

// A 1x1 / stride 1 / unpadded / ungrouped convolution seen as a dense layer over the pixels.
template <class CONFIG_T> struct pointwise_config : CONFIG_T {
    static const unsigned n_in = CONFIG_T::n_chan;
    static const unsigned n_out = CONFIG_T::n_filt;
};

template <class CONFIG_T> struct is_pointwise {
    static const bool value = CONFIG_T::filt_height == 1 && CONFIG_T::filt_width == 1 &&
                              CONFIG_T::stride_height == 1 && CONFIG_T::stride_width == 1 &&
                              CONFIG_T::pad_top + CONFIG_T::pad_left + CONFIG_T::pad_bottom + CONFIG_T::pad_right == 0 &&
                              CONFIG_T::groups == 1;
};

template <class data_T, class res_T, class CONFIG_T>
void conv2d_pointwise(hls::stream<data_T>& in, hls::stream<res_T>& out,
                      const typename CONFIG_T::weight_t weights[], const typename CONFIG_T::bias_t biases[]) {
    #pragma HLS INLINE
    data_T x[CONFIG_T::n_chan];
    #pragma HLS ARRAY_PARTITION variable=x complete
    res_T y[CONFIG_T::n_filt];
    #pragma HLS ARRAY_PARTITION variable=y complete
Pixels:
    for (unsigned p = 0; p < CONFIG_T::in_height * CONFIG_T::in_width; p++) {
    ReadPixel:
        for (unsigned c = 0; c < CONFIG_T::n_chan; c++) {
            #pragma HLS PIPELINE II=1
            x[c] = in.read();
        }
        mac<data_T, res_T, pointwise_config<CONFIG_T> >(x, y, weights, biases);
    WritePixel:
        for (unsigned f = 0; f < CONFIG_T::n_filt; f++) {
            #pragma HLS PIPELINE II=1
            out.write(y[f]);
        }
    }
}

template <class data_T, class res_T, class CONFIG_T>
void conv2d(hls::stream<data_T>& in, hls::stream<res_T>& out,
            const typename CONFIG_T::weight_t weights[window_dims<CONFIG_T>::taps * CONFIG_T::n_chan /
                                                      CONFIG_T::groups * CONFIG_T::n_filt],
            const typename CONFIG_T::bias_t biases[CONFIG_T::n_filt]) {
    #pragma HLS ARRAY_PARTITION variable=weights cyclic factor=CONFIG_T::weight_partition
    #pragma HLS ARRAY_PARTITION variable=biases complete
    if (is_pointwise<CONFIG_T>::value) {
        conv2d_pointwise<data_T, res_T, CONFIG_T>(in, out, weights, biases);
    } else {
        ConvOp<data_T, res_T, CONFIG_T> op(weights, biases);
        slide_window<data_T, CONFIG_T>(in, out, op);
    }
}

} // namespace hetc_hls

#endif
