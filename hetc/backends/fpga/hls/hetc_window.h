// Sliding windows over an (in_height, in_width, n_chan) image stream, shared by conv2d and the
// pooling kernels. The image is never stored whole: a line buffer keeps the last filt_height
// input rows (row r lives in slot r % filt_height) and each output row reads just the input
// rows it needs before its windows are gathered.
//
// CONFIG_T: in_height, in_width, n_chan, filt_height, filt_width, stride_height, stride_width,
// pad_top, pad_left, pad_bottom, pad_right, out_height, out_width.
#ifndef HETC_HLS_WINDOW_H_
#define HETC_HLS_WINDOW_H_

#include "hetc_common.h"

namespace hetc_hls {

template <class CONFIG_T> struct window_dims {
    static const unsigned row = CONFIG_T::in_width * CONFIG_T::n_chan;  // scalars per input row
    static const unsigned taps = CONFIG_T::filt_height * CONFIG_T::filt_width;
    static const unsigned size = taps * CONFIG_T::n_chan;  // scalars per window
};

// Reads input rows next_row, next_row + 1, ... up to `last` (clamped to the image) into the
// line buffer; called with last = in_height - 1 at the end it drains the rows no window used.
template <class data_T, class CONFIG_T>
void fill_lines(hls::stream<data_T>& in, data_T lines[CONFIG_T::filt_height][window_dims<CONFIG_T>::row],
                int& next_row, int last) {
    #pragma HLS INLINE
    const int stop = last < int(CONFIG_T::in_height) - 1 ? last : int(CONFIG_T::in_height) - 1;
FillLines:
    for (; next_row <= stop; next_row++) {
    ReadLine:
        for (unsigned i = 0; i < window_dims<CONFIG_T>::row; i++) {
            #pragma HLS PIPELINE II=1
            lines[next_row % CONFIG_T::filt_height][i] = in.read();
        }
    }
}

// Gathers the window whose top-left input pixel is (top, left) (negative inside the padding)
// as (filt_height, filt_width, n_chan) row-major; taps outside the image read as 0 and have
// inside[tap] = false.
template <class data_T, class CONFIG_T>
void gather_window(const data_T lines[CONFIG_T::filt_height][window_dims<CONFIG_T>::row], int top, int left,
                   data_T win[window_dims<CONFIG_T>::size], bool inside[window_dims<CONFIG_T>::taps]) {
    #pragma HLS INLINE
Taps:
    for (unsigned kh = 0; kh < CONFIG_T::filt_height; kh++) {
        for (unsigned kw = 0; kw < CONFIG_T::filt_width; kw++) {
            const int r = top + int(kh), c = left + int(kw);
            const bool in_image = r >= 0 && r < int(CONFIG_T::in_height) && c >= 0 && c < int(CONFIG_T::in_width);
            const unsigned tap = kh * CONFIG_T::filt_width + kw;
            inside[tap] = in_image;
            for (unsigned ch = 0; ch < CONFIG_T::n_chan; ch++) {
                win[tap * CONFIG_T::n_chan + ch] =
                    in_image ? lines[r % CONFIG_T::filt_height][c * CONFIG_T::n_chan + ch] : data_T(0);
            }
        }
    }
}

// Taps of the window at (top, left) inside the padded image (avg pooling's count_include_pad).
template <class CONFIG_T> unsigned taps_in_padded(int top, int left) {
    #pragma HLS INLINE
    const int h_lo = -int(CONFIG_T::pad_top), h_hi = int(CONFIG_T::in_height + CONFIG_T::pad_bottom);
    const int w_lo = -int(CONFIG_T::pad_left), w_hi = int(CONFIG_T::in_width + CONFIG_T::pad_right);
    unsigned n = 0;
    for (unsigned kh = 0; kh < CONFIG_T::filt_height; kh++) {
        for (unsigned kw = 0; kw < CONFIG_T::filt_width; kw++) {
            const int r = top + int(kh), c = left + int(kw);
            n += (r >= h_lo && r < h_hi && c >= w_lo && c < w_hi) ? 1 : 0;
        }
    }
    return n;
}

// Drives a sliding-window kernel: for each output pixel in row-major order, gathers its window
// and calls Op::compute(win, inside, out), which writes that pixel's output channels.
template <class data_T, class CONFIG_T, class Op, class res_T>
void slide_window(hls::stream<data_T>& in, hls::stream<res_T>& out, Op& op) {
    #pragma HLS INLINE
    typedef window_dims<CONFIG_T> dims;
    static data_T lines[CONFIG_T::filt_height][dims::row];  // static: BRAM; off the C-sim stack
    #pragma HLS ARRAY_PARTITION variable=lines complete dim=1
    data_T win[dims::size];
    #pragma HLS ARRAY_PARTITION variable=win complete
    bool inside[dims::taps];
    #pragma HLS ARRAY_PARTITION variable=inside complete
    int next_row = 0;
OutRows:
    for (unsigned oh = 0; oh < CONFIG_T::out_height; oh++) {
        const int top = int(oh * CONFIG_T::stride_height) - int(CONFIG_T::pad_top);
        fill_lines<data_T, CONFIG_T>(in, lines, next_row, top + int(CONFIG_T::filt_height) - 1);
    OutCols:
        for (unsigned ow = 0; ow < CONFIG_T::out_width; ow++) {
            const int left = int(ow * CONFIG_T::stride_width) - int(CONFIG_T::pad_left);
            gather_window<data_T, CONFIG_T>(lines, top, left, win, inside);
            op.compute(win, inside, top, left, out);
        }
    }
    fill_lines<data_T, CONFIG_T>(in, lines, next_row, int(CONFIG_T::in_height) - 1);
}

} // namespace hetc_hls

#endif
