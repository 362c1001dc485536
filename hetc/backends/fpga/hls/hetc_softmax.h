// Softmax over the last axis of (n_rows, n_in), computed in float with <cmath> (the max is
// subtracted first), then cast to res_t:
//   m = max_i x_i; e_i = exp(x_i - m); out_i = res_t(e_i / sum_i e_i)   (sum in index order).
//
// CONFIG_T: n_rows, n_in.
#ifndef HETC_HLS_SOFTMAX_H_
#define HETC_HLS_SOFTMAX_H_

#include <cmath>

#include "hetc_common.h"

namespace hetc_hls {

template <class data_T, class res_T, class CONFIG_T> void softmax(hls::stream<data_T>& in, hls::stream<res_T>& out) {
    float row[CONFIG_T::n_in];
Rows:
    for (unsigned r = 0; r < CONFIG_T::n_rows; r++) {
        float m = 0;
    ReadRow:
        for (unsigned i = 0; i < CONFIG_T::n_in; i++) {
            #pragma HLS PIPELINE II=1
            row[i] = to_float(in.read());
            m = (i == 0 || row[i] > m) ? row[i] : m;
        }
        float sum = 0;
    Exp:
        for (unsigned i = 0; i < CONFIG_T::n_in; i++) {
            #pragma HLS PIPELINE II=1
            row[i] = std::exp(row[i] - m);
            sum += row[i];
        }
    Normalize:
        for (unsigned i = 0; i < CONFIG_T::n_in; i++) {
            #pragma HLS PIPELINE II=1
            out.write((res_T)(row[i] / sum));
        }
    }
}

} // namespace hetc_hls

#endif
