// The CANN declarations hetc's Ascend host programs use (hetc/backends/ascend/host.py): AscendCL, the
// graph-engine build API (ge_ir_build.h) and the ONNX parser (parser/onnx_parser.h).
//
// A CANN toolkit ships all of these headers, and then this file only includes them. Some public
// copies of the headers (the torch-npu wheel's torch_npu/include) have a trimmed ge/ge_ir_build.h
// without the build API and no parser/onnx_parser.h: for those, the few functions host.cc calls are
// declared below with the exact signatures of CANN's public API, so that they mangle to the
// symbols libge_compiler.so and libfmk_onnx_parser.so export (the same symbols ONNX Runtime's CANN
// execution provider imports; tests/test_ascend_host.py checks this). The ge::ir_option keys
// come from ge/ge_api_types.h, which both kinds of copies have in full.
#ifndef HETC_GE_H_
#define HETC_GE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "acl/acl.h"
#include "ge/ge_api_types.h"
#include "ge/ge_ir_build.h"
#include "graph/ascend_string.h"
#include "graph/ge_error_codes.h"
#include "graph/graph.h"

// The full ge_ir_build.h has this include guard; the trimmed one has none.
#ifndef INC_EXTERNAL_GE_IR_BUILD_H_
namespace ge {
// A built offline model (.om) in host memory.
struct ModelBufferData {
  std::shared_ptr<uint8_t> data = nullptr;
  uint64_t length;
};

// Starts the graph engine's build environment (options: ir_option::SOC_VERSION, ...). Call
// aclgrphBuildFinalize from the same thread when done.
graphStatus aclgrphBuildInitialize(std::map<AscendString, AscendString> &global_options);
void aclgrphBuildFinalize();

// Compiles a graph into an offline model (options: ir_option::INPUT_SHAPE, ...).
graphStatus aclgrphBuildModel(const ge::Graph &graph, const std::map<AscendString, AscendString> &build_options,
                              ModelBufferData &model);

// Writes the model to <output_file>.om.
graphStatus aclgrphSaveModel(const char_t *output_file, const ModelBufferData &model);
}  // namespace ge
#endif  // INC_EXTERNAL_GE_IR_BUILD_H_

#if __has_include("parser/onnx_parser.h")
#include "parser/onnx_parser.h"
#else
namespace ge {
// Parses a serialized ONNX ModelProto of `size` bytes into `graph`.
graphStatus aclgrphParseONNXFromMem(const char *buffer, size_t size,
                                    const std::map<ge::AscendString, ge::AscendString> &parser_params,
                                    ge::Graph &graph);
}  // namespace ge
#endif

#endif  // HETC_GE_H_
