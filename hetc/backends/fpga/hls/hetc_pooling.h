// Pooling: max_pool2d, avg_pool2d (windows over a line buffer, hetc_window.h) and
// global_avg_pool2d, (H, W, C) -> (C,).
//
// max_pool2d CONFIG_T: the window fields of hetc_window.h (filt_* is the pooling kernel).
//   out = res_t(max over the window's taps inside the image): padding never wins.
// avg_pool2d CONFIG_T: the window fields, count_include_pad (bool), accum_t (holds the sum of
//   a window exactly: the emitter uses ap_fixed<W + b, I + b> for ap_fixed<W, I> input,
//   b = ceil(log2(taps))). out = res_t(double(sum) / count), count = taps inside the image,
//   or inside the padded image with count_include_pad.
// global_avg_pool2d CONFIG_T: in_height, in_width, n_chan, accum_t (exact sum of in_height *
//   in_width values). out[c] = res_t(double(sum_c) / (in_height * in_width)).
#ifndef HETC_HLS_POOLING_H_
#define HETC_HLS_POOLING_H_

#include "hetc_common.h"
#include "hetc_window.h"

namespace hetc_hls {

template <class data_T, class res_T, class CONFIG_T> struct MaxPoolOp {
    void compute(const data_T win[], const bool inside[], int, int, hls::stream<res_T>& out) {
        #pragma HLS INLINE
    Channels:
        for (unsigned c = 0; c < CONFIG_T::n_chan; c++) {
            #pragma HLS PIPELINE II=1
            data_T best = 0;
            bool any = false;
            for (unsigned tap = 0; tap < window_dims<CONFIG_T>::taps; tap++) {
                const data_T x = win[tap * CONFIG_T::n_chan + c];
                if (inside[tap] && (!any || x > best)) {
                    best = x;
                    any = true;
                }
            }
            out.write((res_T)best);
        }
    }
};

template <class data_T, class res_T, class CONFIG_T> struct AvgPoolOp {
    void compute(const data_T win[], const bool inside[], int top, int left, hls::stream<res_T>& out) {
        #pragma HLS INLINE
        unsigned count = 0;
        for (unsigned tap = 0; tap < window_dims<CONFIG_T>::taps; tap++) {
            count += inside[tap] ? 1 : 0;
        }
        if (CONFIG_T::count_include_pad) count = taps_in_padded<CONFIG_T>(top, left);
    Channels:
        for (unsigned c = 0; c < CONFIG_T::n_chan; c++) {
            #pragma HLS PIPELINE II=1
            typename CONFIG_T::accum_t sum = 0;
            for (unsigned tap = 0; tap < window_dims<CONFIG_T>::taps; tap++) {
                sum += win[tap * CONFIG_T::n_chan + c];  // padding taps hold 0
            }
            out.write((res_T)(to_double(sum) / double(count)));
        }
    }
};

template <class data_T, class res_T, class CONFIG_T>
void max_pool2d(hls::stream<data_T>& in, hls::stream<res_T>& out) {
    MaxPoolOp<data_T, res_T, CONFIG_T> op;
    slide_window<data_T, CONFIG_T>(in, out, op);
}

template <class data_T, class res_T, class CONFIG_T>
void avg_pool2d(hls::stream<data_T>& in, hls::stream<res_T>& out) {
    AvgPoolOp<data_T, res_T, CONFIG_T> op;
    slide_window<data_T, CONFIG_T>(in, out, op);
}

template <class data_T, class res_T, class CONFIG_T>
void global_avg_pool2d(hls::stream<data_T>& in, hls::stream<res_T>& out) {
    typename CONFIG_T::accum_t sum[CONFIG_T::n_chan];
    #pragma HLS ARRAY_PARTITION variable=sum complete
Clear:
    for (unsigned c = 0; c < CONFIG_T::n_chan; c++) {
        #pragma HLS UNROLL
        sum[c] = 0;
    }
Pixels:
    for (unsigned p = 0; p < CONFIG_T::in_height * CONFIG_T::in_width; p++) {
        for (unsigned c = 0; c < CONFIG_T::n_chan; c++) {
            #pragma HLS PIPELINE II=1
            sum[c] += in.read();
        }
    }
Mean:
    for (unsigned c = 0; c < CONFIG_T::n_chan; c++) {
        #pragma HLS PIPELINE II=1
        out.write((res_T)(to_double(sum[c]) / double(CONFIG_T::in_height * CONFIG_T::in_width)));
    }
}

} // namespace hetc_hls

#endif
