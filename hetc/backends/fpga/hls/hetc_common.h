// hetc_hls: hetc's HLS C++ kernel library (header only, namespace hetc_hls).
//
// Conventions (shared with hetc/backends/fpga/layers.py)
// -------------------------------------------------------
// - A kernel processes ONE sample per call. It reads its whole input from hls::stream s and
//   writes its whole output to hls::stream s, one scalar per read/write, in row-major
//   channels-last order: (H, W, C) images, (rows, features) matrices. The emitter
//   (hetc/backends/fpga/emit.py) chains the calls in a DATAFLOW top function.
// - Signature: template <class data_T, class res_T, class CONFIG_T>
//              void kernel(hls::stream<data_T>& in, hls::stream<res_T>& out, const weights...);
//   CONFIG_T is a per-layer struct of `static const unsigned` sizes, `typedef`s (weight_t,
//   bias_t, accum_t) and `reuse` (each multiplier is used `reuse` times: II = reuse), as in
//   hls4ml's nnet_utils. Each header documents the fields its kernels read.
// - Types are ap_fixed / ap_ufixed or float. A layer must not mix float and fixed operands:
//   C++ has no unambiguous operator between them.
//
// Arithmetic (what hetc's numpy emulation reproduces)
// ---------------------------------------------------
// - dense, conv2d: exactly hls4ml's (nnet_dense_latency.h, nnet_mult.h): acc = accum_t(bias);
//   for each input in weight-row order acc += accum_t(x * w); out = res_t(acc).
// - relu, clip, max pooling, add, multiply, scale_shift, transpose, clone, cast: the exact
//   value of the C++ expression (ap_fixed + and * are exact), cast once to res_t.
//   relu is hls4ml's: x > 0 ? res_t(x) : res_t(0).
// - leaky_relu (x * alpha) and average pooling (sum / count): the one rounding operation is
//   an IEEE double operation on exact operands (the sum is kept exact in accum_t), then the
//   cast to res_t.
// - sigmoid, tanh, softmax, layer_norm: computed in float with <cmath> (x converted through
//   double), cast to res_t.
//
// Adding a kernel
// ---------------
// 1. Write it in a header here: template <class data_T, class res_T, class CONFIG_T>, read and
//    write exactly prod(shape) scalars per call, document the CONFIG_T fields, pipeline the
//    loops that touch streams (II=1) and the arithmetic (II=CONFIG_T::reuse). Include the
//    header from hetc_hls.h.
// 2. Add tests/fpga/kernels/test_<kernel>.cpp comparing with a plain-loop reference (picked up
//    by tests/test_fpga_kernels.py).
// 3. Emit its config struct and call in emit.py (and add the op to layers.OPS).
#ifndef HETC_HLS_COMMON_H_
#define HETC_HLS_COMMON_H_

#include <limits>

#include "ap_fixed.h"
#include "hls_stream.h"

namespace hetc_hls {

constexpr unsigned ceil_div(unsigned n, unsigned d) { return (n + d - 1) / d; }

// Exact for ap_fixed up to 53 bits and for float.
template <class T> inline double to_double(const T& x) { return static_cast<double>(x); }
template <class T> inline float to_float(const T& x) { return static_cast<float>(static_cast<double>(x)); }

// Top-level adapters: an interface array to a stream and back.
#ifndef __SYNTHESIS__
// C-simulation only: fills a weight array from exactly representable doubles (emit.py writes
// ap_fixed weights this way; a literal initializer of thousands of ap_fixed values compiles slowly).
template <class T> bool load_table(T* table, const double* values, unsigned n) {
    for (unsigned i = 0; i < n; i++) table[i] = T(values[i]);
    return true;
}
#endif

template <class T, unsigned N> void array_to_stream(const T in[N], hls::stream<T>& out) {
ArrayToStream:
    for (unsigned i = 0; i < N; i++) {
        #pragma HLS PIPELINE II=1
        out.write(in[i]);
    }
}

template <class T, unsigned N> void stream_to_array(hls::stream<T>& in, T out[N]) {
StreamToArray:
    for (unsigned i = 0; i < N; i++) {
        #pragma HLS PIPELINE II=1
        out[i] = in.read();
    }
}

// Drains a stream nobody consumes (a DATAFLOW process must not leave data behind).
template <class T, unsigned N> void sink(hls::stream<T>& in) {
Sink:
    for (unsigned i = 0; i < N; i++) {
        #pragma HLS PIPELINE II=1
        in.read();
    }
}

// The multiply-accumulate of a dense layer on one row, hls4ml's arithmetic and reuse model
// (nnet::dense_latency): all products unrolled, at most multiplier_limit multipliers, II=reuse.
// CONFIG_T: n_in, n_out, reuse, multiplier_limit, weight_t, bias_t, accum_t.
// weights are (n_in, n_out) row-major.
template <class data_T, class res_T, class CONFIG_T>
void mac(const data_T x[CONFIG_T::n_in], res_T y[CONFIG_T::n_out],
         const typename CONFIG_T::weight_t weights[CONFIG_T::n_in * CONFIG_T::n_out],
         const typename CONFIG_T::bias_t biases[CONFIG_T::n_out]) {
    #pragma HLS INLINE off
    #pragma HLS PIPELINE II=CONFIG_T::reuse
    #pragma HLS ALLOCATION operation instances=mul limit=CONFIG_T::multiplier_limit
    typename CONFIG_T::accum_t acc[CONFIG_T::n_out];
    #pragma HLS ARRAY_PARTITION variable=acc complete
Bias:
    for (unsigned j = 0; j < CONFIG_T::n_out; j++) {
        acc[j] = (typename CONFIG_T::accum_t)biases[j];
    }
Product:
    for (unsigned i = 0; i < CONFIG_T::n_in; i++) {
        for (unsigned j = 0; j < CONFIG_T::n_out; j++) {
            acc[j] += (typename CONFIG_T::accum_t)(x[i] * weights[i * CONFIG_T::n_out + j]);
        }
    }
Result:
    for (unsigned j = 0; j < CONFIG_T::n_out; j++) {
        y[j] = (res_T)acc[j];
    }
}

} // namespace hetc_hls

#endif
