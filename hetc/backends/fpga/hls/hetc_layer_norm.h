// Layer normalisation over the last axis of (n_rows, n_in), computed in float with <cmath>,
// then cast to res_t:
//   mean = sum x / n;  var = sum (x - mean)^2 / n   (sums in index order)
//   out_i = res_t((x_i - mean) / sqrt(var + epsilon) * gamma_i + beta_i)
// with gamma, beta the weight_t / bias_t constants converted to float.
//
// CONFIG_T: n_rows, n_in, `static constexpr double epsilon`, weight_t (gamma), bias_t (beta).
#ifndef HETC_HLS_LAYER_NORM_H_
#define HETC_HLS_LAYER_NORM_H_

#include <cmath>

#include "hetc_common.h"

namespace hetc_hls {

template <class data_T, class res_T, class CONFIG_T>
void layer_norm(hls::stream<data_T>& in, hls::stream<res_T>& out, const typename CONFIG_T::weight_t gamma[CONFIG_T::n_in],
                const typename CONFIG_T::bias_t beta[CONFIG_T::n_in]) {
    const float epsilon = CONFIG_T::epsilon;
    float row[CONFIG_T::n_in];
Rows:
    for (unsigned r = 0; r < CONFIG_T::n_rows; r++) {
        float sum = 0;
    ReadRow:
        for (unsigned i = 0; i < CONFIG_T::n_in; i++) {
            #pragma HLS PIPELINE II=1
            row[i] = to_float(in.read());
            sum += row[i];
        }
        const float mean = sum / CONFIG_T::n_in;
        float sq = 0;
    Variance:
        for (unsigned i = 0; i < CONFIG_T::n_in; i++) {
            #pragma HLS PIPELINE II=1
            const float d = row[i] - mean;
            sq += d * d;
        }
        const float inv_std = 1.0f / std::sqrt(sq / CONFIG_T::n_in + epsilon);
    Normalize:
        for (unsigned i = 0; i < CONFIG_T::n_in; i++) {
            #pragma HLS PIPELINE II=1
            out.write((res_T)((row[i] - mean) * inv_std * to_float(gamma[i]) + to_float(beta[i])));
        }
    }
}

} // namespace hetc_hls

#endif
