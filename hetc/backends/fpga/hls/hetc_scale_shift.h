// Per-channel affine map (a folded batch norm): out = res_t(x * scale[c] + shift[c]), c the
// index along the last axis; exact before the cast for ap_fixed (hls4ml's nnet::normalize).
//
// CONFIG_T: n_elem, n_chan (the last axis; n_elem is a multiple), weight_t (scale), bias_t
// (shift).
#ifndef HETC_HLS_SCALE_SHIFT_H_
#define HETC_HLS_SCALE_SHIFT_H_

#include "hetc_common.h"

namespace hetc_hls {

template <class data_T, class res_T, class CONFIG_T>
void scale_shift(hls::stream<data_T>& in, hls::stream<res_T>& out,
                 const typename CONFIG_T::weight_t scale[CONFIG_T::n_chan],
                 const typename CONFIG_T::bias_t shift[CONFIG_T::n_chan]) {
    #pragma HLS ARRAY_PARTITION variable=scale complete
    #pragma HLS ARRAY_PARTITION variable=shift complete
Pixels:
    for (unsigned p = 0; p < CONFIG_T::n_elem / CONFIG_T::n_chan; p++) {
    Channels:
        for (unsigned c = 0; c < CONFIG_T::n_chan; c++) {
            #pragma HLS PIPELINE II=1
            const data_T x = in.read();
            out.write((res_T)(x * scale[c] + shift[c]));
        }
    }
}

} // namespace hetc_hls

#endif
