// Two streams into one (add, multiply) and one stream into two (clone).
//
// CONFIG_T: n_elem. add: out = res_t(a + b); multiply: out = res_t(a * b), both exact before
// the cast for ap_fixed. clone copies every element to both outputs: the emitter uses it for
// a tensor read by several layers (chaining clones for more than two readers).
#ifndef HETC_HLS_MERGE_H_
#define HETC_HLS_MERGE_H_

#include "hetc_common.h"

namespace hetc_hls {

template <class in1_T, class in2_T, class res_T, class CONFIG_T>
void add(hls::stream<in1_T>& in1, hls::stream<in2_T>& in2, hls::stream<res_T>& out) {
Add:
    for (unsigned i = 0; i < CONFIG_T::n_elem; i++) {
        #pragma HLS PIPELINE II=1
        const in1_T a = in1.read();
        const in2_T b = in2.read();
        out.write((res_T)(a + b));
    }
}

template <class in1_T, class in2_T, class res_T, class CONFIG_T>
void multiply(hls::stream<in1_T>& in1, hls::stream<in2_T>& in2, hls::stream<res_T>& out) {
Multiply:
    for (unsigned i = 0; i < CONFIG_T::n_elem; i++) {
        #pragma HLS PIPELINE II=1
        const in1_T a = in1.read();
        const in2_T b = in2.read();
        out.write((res_T)(a * b));
    }
}

template <class T, class CONFIG_T> void clone(hls::stream<T>& in, hls::stream<T>& out1, hls::stream<T>& out2) {
Clone:
    for (unsigned i = 0; i < CONFIG_T::n_elem; i++) {
        #pragma HLS PIPELINE II=1
        const T x = in.read();
        out1.write(x);
        out2.write(x);
    }
}

} // namespace hetc_hls

#endif
