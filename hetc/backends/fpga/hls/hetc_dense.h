// Dense (fully connected) layer applied to every row of a (n_rows, n_in) input.
//
// CONFIG_T: n_rows, n_in, n_out; reuse (II of the multiply-accumulate), multiplier_limit
// (= ceil(n_in * n_out / reuse)), weight_partition (cyclic partition factor of the weights:
// the products needed per cycle); weight_t, bias_t, accum_t.
// weights: (n_in, n_out) row-major; biases: (n_out,). Arithmetic: hls4ml's (see mac()).
#ifndef HETC_HLS_DENSE_H_
#define HETC_HLS_DENSE_H_

#include "hetc_common.h"

namespace hetc_hls {

template <class data_T, class res_T, class CONFIG_T>
void dense(hls::stream<data_T>& in, hls::stream<res_T>& out,
           const typename CONFIG_T::weight_t weights[CONFIG_T::n_in * CONFIG_T::n_out],
           const typename CONFIG_T::bias_t biases[CONFIG_T::n_out]) {
    #pragma HLS ARRAY_PARTITION variable=weights cyclic factor=CONFIG_T::weight_partition
    #pragma HLS ARRAY_PARTITION variable=biases complete
    data_T x[CONFIG_T::n_in];
    #pragma HLS ARRAY_PARTITION variable=x complete
    res_T y[CONFIG_T::n_out];
    #pragma HLS ARRAY_PARTITION variable=y complete
Rows:
    for (unsigned r = 0; r < CONFIG_T::n_rows; r++) {
    ReadRow:
        for (unsigned i = 0; i < CONFIG_T::n_in; i++) {
            #pragma HLS PIPELINE II=1
            x[i] = in.read();
        }
        mac<data_T, res_T, CONFIG_T>(x, y, weights, biases);
    WriteRow:
        for (unsigned j = 0; j < CONFIG_T::n_out; j++) {
            #pragma HLS PIPELINE II=1
            out.write(y[j]);
        }
    }
}

} // namespace hetc_hls

#endif
