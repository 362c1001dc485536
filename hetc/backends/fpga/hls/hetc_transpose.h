// Axis permutation of a tensor of up to 4 axes. The input is buffered whole (a transpose
// cannot start before its last input arrives, in general), then read in output order.
//
// CONFIG_T: n_elem; out_d0..out_d3, the output shape left-padded with 1s to 4 axes;
// in_s0..in_s3, the input stride (in elements) of the input axis each output axis comes from.
// out[i0, i1, i2, i3] = res_t(in_flat[i0 * in_s0 + i1 * in_s1 + i2 * in_s2 + i3 * in_s3]).
#ifndef HETC_HLS_TRANSPOSE_H_
#define HETC_HLS_TRANSPOSE_H_

#include "hetc_common.h"

namespace hetc_hls {

template <class data_T, class res_T, class CONFIG_T> void transpose(hls::stream<data_T>& in, hls::stream<res_T>& out) {
    static data_T buffer[CONFIG_T::n_elem];  // static: BRAM; off the C-sim stack
Read:
    for (unsigned i = 0; i < CONFIG_T::n_elem; i++) {
        #pragma HLS PIPELINE II=1
        buffer[i] = in.read();
    }
Write:
    for (unsigned i0 = 0; i0 < CONFIG_T::out_d0; i0++) {
        for (unsigned i1 = 0; i1 < CONFIG_T::out_d1; i1++) {
            for (unsigned i2 = 0; i2 < CONFIG_T::out_d2; i2++) {
                for (unsigned i3 = 0; i3 < CONFIG_T::out_d3; i3++) {
                    #pragma HLS PIPELINE II=1
                    out.write((res_T)buffer[i0 * CONFIG_T::in_s0 + i1 * CONFIG_T::in_s1 + i2 * CONFIG_T::in_s2 +
                                            i3 * CONFIG_T::in_s3]);
                }
            }
        }
    }
}

} // namespace hetc_hls

#endif
