// hetc_hls: hetc's HLS kernel library. Include this one header. Conventions, arithmetic and
// how to add a kernel: hetc_common.h.
#ifndef HETC_HLS_H_
#define HETC_HLS_H_

#include "hetc_common.h"
#include "hetc_activation.h"
#include "hetc_conv2d.h"
#include "hetc_dense.h"
#include "hetc_layer_norm.h"
#include "hetc_merge.h"
#include "hetc_pooling.h"
#include "hetc_scale_shift.h"
#include "hetc_softmax.h"
#include "hetc_transpose.h"
#include "hetc_window.h"

#endif
