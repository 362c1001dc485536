"""The Ascend region host program (hetc/backends/ascend/host.py) without an NPU or CANN toolkit.

- host.cc compiles (-Wall -Wextra -Werror) against CANN's public headers from the torch-npu wheel
  (fetched by cann_sdk.py) plus hetc_ge.h, and exports ``__tvm_ffi_<spec.symbol>``;
- the graph-engine / parser functions hetc_ge.h declares, and every ``ge::`` symbol host.o
  imports, mangle exactly to symbols that ONNX Runtime's CANN provider library imports (so the
  declarations match the real CANN signatures); a deliberately wrong declaration does not;
- hetc_ge.h also compiles against full headers (no redefinitions);
- host.cc runs, linked with a stand-in for the CANN runtime (``STUB_CC``): data flow in
  destination-passing style, model.om before model.onnx, the in-process build's options, batch
  gears, argument checks, error messages and retry after a failed setup;
- build.sh runs ATC and g++ (fakes on PATH that record their arguments) with the right options.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import cann_sdk
import numpy as np
import pytest
import tvm_ffi
import tvm_ffi.libinfo

from hetc.backends.ascend.host import HEADER, host_files
from hetc.backends.ascend.spec import RegionSpec, TensorIO

pytestmark = pytest.mark.skipif(not (shutil.which("g++") and shutil.which("nm")), reason="needs g++ and nm")

IMAGE = RegionSpec("ascend_region0_0123abcd", "ascend_region0", (TensorIO("images", "float32", (1, 3, 224, 224)),),
                   (TensorIO("logits", "float32", (1, 1000)),), "Ascend910B1")
TOKENS = RegionSpec("ascend_region1_89abcdef", "ascend_region1", (TensorIO("input_ids", "int64", (2, 16)),),
                    (TensorIO("hidden", "float32", (2, 16, 32)),), "Ascend310P3")
PAIR = RegionSpec("ascend_region2_deadbeef", "ascend_region2",
                  (TensorIO("a", "float32", (2, 8)), TensorIO("b", "int32", (2, 4))),
                  (TensorIO("sum", "float32", (2, 8)), TensorIO("index", "int32", (2, 4))), "Ascend910B1")
# symbolic dims built for gears (ATC --dynamic_dims): a[batch, 8], b[batch, seq]
DYN = RegionSpec("ascend_region3_0badf00d", "ascend_region3",
                 (TensorIO("a", "float32", ("batch", 8)), TensorIO("b", "int32", ("batch", "seq"))),
                 (TensorIO("sum", "float32", ("batch", 8)), TensorIO("index", "int32", ("batch", "seq"))),
                 "Ascend910B1", dims=("batch", "seq"), gears=((1, 2), (1, 4), (2, 2), (2, 4)), dynamic="dims")
SPECS = (IMAGE, TOKENS, PAIR, DYN)

# The AscendCL functions host.o imports: those ONNX Runtime's CANN provider also imports, and the rest
# (context per calling thread; batch gears of an ATC model; dataset cleanup). All are declared in
# the torch-npu wheel's acl/*.h (host.cc compiles against them) and live in libascendcl.so.
ACL_ALSO_IN_ORT = {
    "aclInit", "aclGetRecentErrMsg", "aclrtSetDevice", "aclrtCreateStream", "aclrtDestroyStream",
    "aclrtSynchronizeStream", "aclrtMalloc", "aclrtFree", "aclrtMemcpy", "aclCreateDataBuffer",
    "aclDestroyDataBuffer", "aclmdlLoadFromFile", "aclmdlLoadFromMem", "aclmdlUnload", "aclmdlCreateDesc",
    "aclmdlDestroyDesc", "aclmdlGetDesc", "aclmdlGetNumInputs", "aclmdlGetNumOutputs",
    "aclmdlGetInputSizeByIndex", "aclmdlGetOutputSizeByIndex", "aclmdlCreateDataset", "aclmdlDestroyDataset",
    "aclmdlAddDatasetBuffer", "aclmdlGetDatasetBuffer", "aclmdlExecuteAsync",
}
ACL_HETC_ONLY = {
    "aclrtGetCurrentContext", "aclrtSetCurrentContext", "aclmdlGetDynamicBatch", "aclmdlGetInputIndexByName",
    "aclmdlSetDynamicBatchSize", "aclmdlGetDatasetNumBuffers", "aclmdlGetInputDynamicGearCount",
    "aclmdlSetInputDynamicDims",
}

# Calls every function hetc_ge.h declares (as host.cc does), so that the object imports them.
PROBE_CC = """\
#include "hetc_ge.h"
void probe() {
  std::map<ge::AscendString, ge::AscendString> options;
  ge::Graph graph("probe");
  ge::ModelBufferData model;
  ge::aclgrphBuildInitialize(options);
  ge::aclgrphParseONNXFromMem("", 0, options, graph);
  ge::aclgrphBuildModel(graph, options, model);
  ge::aclgrphSaveModel("model", model);
  ge::aclgrphBuildFinalize();
}
"""

# Wrong declarations (an int length; a const map): their symbols must not be among ORT's imports.
WRONG_CC = """\
#include <map>
#include "graph/ascend_string.h"
#include "graph/graph.h"
namespace ge {
graphStatus aclgrphParseONNXFromMem(const char *buffer, int size, const std::map<AscendString, AscendString> &params,
                                    Graph &graph);
graphStatus aclgrphBuildInitialize(const std::map<AscendString, AscendString> &global_options);
}
void probe() {
  std::map<ge::AscendString, ge::AscendString> options;
  ge::Graph graph("probe");
  ge::aclgrphParseONNXFromMem("", 0, options, graph);
  ge::aclgrphBuildInitialize(options);
}
"""

# What a CANN toolkit's full headers declare (written from CANN's public API reference), to check
# that hetc_ge.h then only includes them.
FULL_HEADERS = {
    "ge/ge_ir_build.h": """\
#ifndef INC_EXTERNAL_GE_IR_BUILD_H_
#define INC_EXTERNAL_GE_IR_BUILD_H_
#include <map>
#include <memory>
#include <string>
#include "graph/graph.h"
#include "graph/ge_error_codes.h"
namespace ge {
struct ModelBufferData {
  std::shared_ptr<uint8_t> data = nullptr;
  uint64_t length;
};
graphStatus aclgrphBuildInitialize(std::map<std::string, std::string> global_options);
graphStatus aclgrphBuildInitialize(std::map<AscendString, AscendString> &global_options);
void aclgrphBuildFinalize();
graphStatus aclgrphBuildModel(const ge::Graph &graph, const std::map<std::string, std::string> &build_options,
                              ModelBufferData &model);
graphStatus aclgrphBuildModel(const ge::Graph &graph, const std::map<AscendString, AscendString> &build_options,
                              ModelBufferData &model);
graphStatus aclgrphSaveModel(const std::string &output_file, const ModelBufferData &model);
graphStatus aclgrphSaveModel(const char_t *output_file, const ModelBufferData &model);
}  // namespace ge
#endif
""",
    "parser/onnx_parser.h": """\
#ifndef INC_EXTERNAL_PARSER_ONNX_PARSER_H_
#define INC_EXTERNAL_PARSER_ONNX_PARSER_H_
#include <map>
#include "graph/ascend_string.h"
#include "graph/ge_error_codes.h"
#include "graph/graph.h"
namespace ge {
graphStatus aclgrphParseONNX(const char *model_file, const std::map<ge::AscendString, ge::AscendString> &parser_params,
                             ge::Graph &graph);
graphStatus aclgrphParseONNXFromMem(const char *buffer, size_t size,
                                    const std::map<ge::AscendString, ge::AscendString> &parser_params, ge::Graph &graph);
}  // namespace ge
#endif
""",
}

# A stand-in for the CANN runtime, linked into the region library in place of libascendcl & co.
# "Device" memory is host memory; a "model" is text: "inputs <bytes>...\noutputs <bytes>...\n
# [gears <batch>...]" (with gears, one more input: the batch size). Executing it copies input
# j % n to output j byte by byte. hetc_stub_log() returns every call; STUB_FAIL=<function> fails it.
STUB_CC = r"""
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "hetc_ge.h"

struct aclDataBuffer { void* data; size_t size; };
struct aclmdlDataset { std::vector<aclDataBuffer*> buffers; };
struct aclmdlDesc { std::vector<size_t> inputs, outputs, gears; size_t dim_gears = 0; };

namespace {
std::string g_log, g_onnx;
std::map<uint32_t, aclmdlDesc> g_models;
bool g_init = false;
int g_context = 0;

void Log(const std::string& line) { g_log += line + "\n"; }
aclError Fail(const char* function) {
  const char* fail = std::getenv("STUB_FAIL");
  return fail != nullptr && std::strcmp(fail, function) == 0 ? 507011 : ACL_SUCCESS;
}
aclError Parse(const std::string& text, uint32_t* id) {
  aclmdlDesc desc;
  std::istringstream in(text);
  std::string word;
  std::vector<size_t>* list = nullptr;
  while (in >> word) {
    if (word == "inputs") list = &desc.inputs;
    else if (word == "outputs") list = &desc.outputs;
    else if (word == "gears") list = &desc.gears;
    else if (word == "dimgears") { in >> desc.dim_gears; list = nullptr; }
    else if (list != nullptr) list->push_back(std::stoul(word));
  }
  if (!desc.gears.empty() || desc.dim_gears > 0) desc.inputs.push_back(sizeof(uint64_t));
  *id = static_cast<uint32_t>(g_models.size() + 1);
  g_models[*id] = desc;
  return ACL_SUCCESS;
}
std::string Text(const std::map<ge::AscendString, ge::AscendString>& options) {
  std::string text;
  for (const auto& kv : options) text += std::string(" ") + kv.first.GetString() + "=" + kv.second.GetString();
  return text;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) const char* hetc_stub_log() { return g_log.c_str(); }

const char* aclGetRecentErrMsg() { return "stub error message"; }
aclError aclInit(const char*) {
  Log("aclInit");
  if (g_init) return ACL_ERROR_REPEAT_INITIALIZE;
  g_init = true;
  return ACL_SUCCESS;
}
aclError aclrtSetDevice(int32_t device) { Log("aclrtSetDevice " + std::to_string(device)); return Fail("aclrtSetDevice"); }
aclError aclrtGetCurrentContext(aclrtContext* context) { *context = &g_context; return ACL_SUCCESS; }
aclError aclrtSetCurrentContext(aclrtContext context) { return context == &g_context ? ACL_SUCCESS : 1; }
aclError aclrtCreateStream(aclrtStream* stream) { *stream = &g_context; return ACL_SUCCESS; }
aclError aclrtDestroyStream(aclrtStream) { Log("aclrtDestroyStream"); return ACL_SUCCESS; }
aclError aclrtSynchronizeStream(aclrtStream) { return ACL_SUCCESS; }
aclError aclrtMalloc(void** data, size_t size, aclrtMemMallocPolicy) { *data = std::calloc(size, 1); return ACL_SUCCESS; }
aclError aclrtFree(void* data) { std::free(data); Log("aclrtFree"); return ACL_SUCCESS; }
aclError aclrtMemcpy(void* dst, size_t capacity, const void* src, size_t count, aclrtMemcpyKind kind) {
  if (count > capacity) return 1;
  std::memcpy(dst, src, count);
  Log(std::string("aclrtMemcpy ") + (kind == ACL_MEMCPY_HOST_TO_DEVICE ? "to device " : "to host ") + std::to_string(count));
  return ACL_SUCCESS;
}
aclDataBuffer* aclCreateDataBuffer(void* data, size_t size) { return new aclDataBuffer{data, size}; }
aclError aclDestroyDataBuffer(const aclDataBuffer* buffer) { delete buffer; return ACL_SUCCESS; }
aclmdlDataset* aclmdlCreateDataset() { return new aclmdlDataset; }
aclError aclmdlDestroyDataset(const aclmdlDataset* dataset) { delete dataset; return ACL_SUCCESS; }
aclError aclmdlAddDatasetBuffer(aclmdlDataset* dataset, aclDataBuffer* buffer) {
  dataset->buffers.push_back(buffer);
  return ACL_SUCCESS;
}
size_t aclmdlGetDatasetNumBuffers(const aclmdlDataset* dataset) { return dataset->buffers.size(); }
aclDataBuffer* aclmdlGetDatasetBuffer(const aclmdlDataset* dataset, size_t i) { return dataset->buffers.at(i); }
aclmdlDesc* aclmdlCreateDesc() { return new aclmdlDesc; }
aclError aclmdlDestroyDesc(aclmdlDesc* desc) { delete desc; return ACL_SUCCESS; }
aclError aclmdlGetDesc(aclmdlDesc* desc, uint32_t id) { *desc = g_models.at(id); return ACL_SUCCESS; }
size_t aclmdlGetNumInputs(aclmdlDesc* desc) { return desc->inputs.size(); }
size_t aclmdlGetNumOutputs(aclmdlDesc* desc) { return desc->outputs.size(); }
size_t aclmdlGetInputSizeByIndex(aclmdlDesc* desc, size_t i) { return desc->inputs.at(i); }
size_t aclmdlGetOutputSizeByIndex(aclmdlDesc* desc, size_t i) { return desc->outputs.at(i); }
aclError aclmdlGetDynamicBatch(const aclmdlDesc* desc, aclmdlBatch* batch) {
  batch->batchCount = desc->gears.size();
  for (size_t g = 0; g < desc->gears.size(); g++) batch->batch[g] = desc->gears[g];
  return ACL_SUCCESS;
}
aclError aclmdlGetInputDynamicGearCount(const aclmdlDesc* desc, size_t, size_t* count) {
  *count = desc->dim_gears;
  return ACL_SUCCESS;
}
aclError aclmdlSetInputDynamicDims(uint32_t, aclmdlDataset*, size_t index, const aclmdlIODims* dims) {
  std::string text;
  for (size_t k = 0; k < dims->dimCount; k++) text += (k ? "," : "") + std::to_string(dims->dims[k]);
  Log("aclmdlSetInputDynamicDims " + std::to_string(index) + " " + text);
  return ACL_SUCCESS;
}
aclError aclmdlGetInputIndexByName(const aclmdlDesc* desc, const char* name, size_t* index) {
  if ((desc->gears.empty() && desc->dim_gears == 0) || std::strcmp(name, ACL_DYNAMIC_TENSOR_NAME) != 0) return 1;
  *index = desc->inputs.size() - 1;
  return ACL_SUCCESS;
}
aclError aclmdlSetDynamicBatchSize(uint32_t, aclmdlDataset* dataset, size_t index, uint64_t batch) {
  std::memcpy(dataset->buffers.at(index)->data, &batch, sizeof batch);
  Log("aclmdlSetDynamicBatchSize " + std::to_string(index) + " " + std::to_string(batch));
  return ACL_SUCCESS;
}
aclError aclmdlLoadFromFile(const char* path, uint32_t* id) {
  Log(std::string("aclmdlLoadFromFile ") + path);
  if (Fail("aclmdlLoadFromFile") != ACL_SUCCESS) return Fail("aclmdlLoadFromFile");
  std::ifstream file(path);
  return Parse(std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()), id);
}
aclError aclmdlLoadFromMem(const void* data, size_t size, uint32_t* id) {
  Log("aclmdlLoadFromMem");
  return Parse(std::string(static_cast<const char*>(data), size), id);
}
aclError aclmdlUnload(uint32_t id) { Log("aclmdlUnload"); g_models.erase(id); return ACL_SUCCESS; }
aclError aclmdlExecuteAsync(uint32_t id, const aclmdlDataset* inputs, aclmdlDataset* outputs, aclrtStream) {
  Log("aclmdlExecuteAsync");
  const aclmdlDesc& desc = g_models.at(id);
  if (inputs->buffers.size() != desc.inputs.size() || outputs->buffers.size() != desc.outputs.size()) return 2;
  const size_t n = desc.inputs.size() - (desc.gears.empty() && desc.dim_gears == 0 ? 0 : 1);
  for (size_t j = 0; j < outputs->buffers.size(); j++) {
    const aclDataBuffer* in = inputs->buffers[j % n];
    aclDataBuffer* out = outputs->buffers[j];
    for (size_t k = 0; k < out->size; k++) {
      static_cast<char*>(out->data)[k] = static_cast<const char*>(in->data)[k % in->size];
    }
  }
  return Fail("aclmdlExecuteAsync");
}

namespace ge {
AscendString::AscendString(const char_t* const name) : name_(std::make_shared<std::string>(name ? name : "")) {}
const char_t* AscendString::GetString() const { return name_ ? name_->c_str() : ""; }
bool AscendString::operator<(const AscendString& other) const { return std::strcmp(GetString(), other.GetString()) < 0; }
Graph::Graph(const char_t*) {}
graphStatus aclgrphBuildInitialize(std::map<AscendString, AscendString>& options) {
  Log("aclgrphBuildInitialize" + Text(options));
  return GRAPH_SUCCESS;
}
void aclgrphBuildFinalize() { Log("aclgrphBuildFinalize"); }
graphStatus aclgrphParseONNXFromMem(const char* buffer, size_t size, const std::map<AscendString, AscendString>&,
                                    Graph&) {
  Log("aclgrphParseONNXFromMem " + std::to_string(size));
  g_onnx.assign(buffer, size);
  return GRAPH_SUCCESS;
}
graphStatus aclgrphBuildModel(const Graph&, const std::map<AscendString, AscendString>& options, ModelBufferData& model) {
  Log("aclgrphBuildModel" + Text(options));
  model.data = std::shared_ptr<uint8_t>(new uint8_t[g_onnx.size()], std::default_delete<uint8_t[]>());
  std::memcpy(model.data.get(), g_onnx.data(), g_onnx.size());
  model.length = g_onnx.size();
  return GRAPH_SUCCESS;
}
graphStatus aclgrphSaveModel(const char_t* output_file, const ModelBufferData& model) {
  Log(std::string("aclgrphSaveModel ") + output_file);
  std::ofstream(std::string(output_file) + ".om").write(reinterpret_cast<const char*>(model.data.get()), model.length);
  return GRAPH_SUCCESS;
}
}  // namespace ge
"""


# ---- helpers -----------------------------------------------------------------------------------------

def write_region(spec: RegionSpec, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rel, text in host_files(spec).items():
        (folder / rel).write_text(text)
    (folder / "build.sh").chmod(0o755)
    return folder


def cxx(*args: str | Path, cwd: Path) -> None:
    proc = subprocess.run(["g++", *map(str, args)], check=False, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"g++ {' '.join(map(str, args))}\n{proc.stderr[-6000:]}"


def cxx_flags(include: Path, *first: Path) -> list[str]:
    dirs = [*first, include, Path(tvm_ffi.libinfo.find_include_path()), Path(tvm_ffi.libinfo.find_dlpack_include_path())]
    return ["-std=c++17", "-fPIC", "-Wall", "-Wextra", "-Werror", *[a for d in dirs for a in ("-isystem", str(d))]]


def undefined(path: Path, dynamic: bool = False) -> set[str]:
    args = ["nm", "-D", "--undefined-only"] if dynamic else ["nm", "-u"]
    out = subprocess.run([*args, str(path)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def ge_symbols(symbols: set[str]) -> set[str]:
    return {s for s in symbols if re.match(r"_ZNK?2ge", s)}


def ge_function(symbol: str) -> str:
    """The unqualified name in a mangled ``ge::`` symbol (``_ZN2ge20aclgrphBuildFinalizeEv`` ->
    ``aclgrphBuildFinalize``)."""
    m = re.match(r"_ZNK?2ge(\d+)", symbol)
    return symbol[m.end():m.end() + int(m.group(1))]


# ---- compiled once per module, in parallel ------------------------------------------------------------

class Builds:
    def __init__(self, root: Path, include: Path):
        self.root, self.include = root, include
        self.pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2)
        self.jobs: dict[str, Future] = {}

    def compile(self, obj: str, source: Path, *flags: str, first: Path | None = None) -> None:
        """``g++ -c source -o obj`` (next to source) in the background; ``first``: a header folder
        searched before the CANN headers."""
        def job() -> Path:
            cxx(*cxx_flags(self.include, *([first] if first else [])), *flags, "-c", source.name, "-o", obj,
                cwd=source.parent)
            return source.parent / obj
        self.jobs[obj] = self.pool.submit(job)

    def submit(self, key: str, fn, *args) -> None:
        self.jobs[key] = self.pool.submit(fn, *args)

    def __getitem__(self, key: str) -> Path:
        return self.jobs[key].result()


@pytest.fixture(scope="module")
def include() -> Path:
    return cann_sdk.require(cann_sdk.cann_include)


@pytest.fixture(scope="module")
def ort_imports() -> set[str]:
    return undefined(cann_sdk.require(cann_sdk.ort_cann_provider), dynamic=True)


@pytest.fixture(scope="module")
def builds(include, tmp_path_factory):
    root = tmp_path_factory.mktemp("ascend_host")
    b = Builds(root, include)
    for spec in SPECS:
        folder = write_region(spec, root / spec.name)
        b.compile(f"{spec.symbol}.o", folder / "host.cc")
    probes = root / "probes"
    probes.mkdir()
    (probes / "hetc_ge.h").write_text(HEADER.read_text())
    for name, text in (("probe", PROBE_CC), ("wrong", WRONG_CC), ("stub", STUB_CC)):
        (probes / f"{name}.cc").write_text(text)
    b.compile("probe.o", probes / "probe.cc")
    b.compile("wrong.o", probes / "wrong.cc")
    b.compile("stub.o", probes / "stub.cc", "-fvisibility=hidden")
    full = root / "full"
    for rel, text in FULL_HEADERS.items():
        (full / rel).parent.mkdir(parents=True, exist_ok=True)
        (full / rel).write_text(text)
    folder = write_region(PAIR, root / "full_headers")
    b.compile("full_headers.o", folder / "host.cc", first=full)
    b.submit("toolkit", _toolkit, root / "toolkit", include, probes / "stub.cc")
    yield b
    b.pool.shutdown(cancel_futures=True)


# ---- host.cc compiles and exports spec.symbol ---------------------------------------------------------

@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.symbol)
def test_host_cc_compiles_and_exports_the_symbol(builds, ort_imports, spec):
    obj = builds[f"{spec.symbol}.o"]
    out = subprocess.run(["nm", "--defined-only", str(obj)], capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if " T __tvm_ffi_" in line}
    assert exported == {f"__tvm_ffi_{spec.symbol}"}
    text = (builds.root / spec.name / "host.cc").read_text()
    assert text.count(f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({spec.symbol}, Entry);") == 1
    entry = re.search(r"void Entry\((.*?)\)", text, re.DOTALL).group(1)
    assert entry.count("tvm::ffi::TensorView") == len(spec.inputs) + len(spec.outputs)
    # every ge:: symbol host.o imports is one ORT's CANN provider imports too
    imports = undefined(obj)
    assert ge_symbols(imports) and ge_symbols(imports) <= ort_imports, ge_symbols(imports) - ort_imports
    acl = {s for s in imports if s.startswith("acl")}
    # the gear calls of the other kinds of region are compiled out (kDynamic is a constant)
    gear_calls = {"aclmdlSetDynamicBatchSize", "aclmdlGetInputDynamicGearCount", "aclmdlSetInputDynamicDims"}
    assert ACL_ALSO_IN_ORT | (ACL_HETC_ONLY - gear_calls) <= acl <= ACL_ALSO_IN_ORT | ACL_HETC_ONLY
    if spec.dynamic == "dims":
        assert {"aclmdlGetInputDynamicGearCount", "aclmdlSetInputDynamicDims"} <= acl
    assert ACL_ALSO_IN_ORT <= ort_imports and not ACL_HETC_ONLY & ort_imports


def test_acl_functions_are_declared_in_the_public_headers(include):
    headers = "\n".join(p.read_text(errors="replace") for p in (include / "acl").rglob("*.h"))
    for name in ACL_ALSO_IN_ORT | ACL_HETC_ONLY:
        assert re.search(rf"ACL_FUNC_VISIBILITY[^;(]*\b{name}\s*\(", headers), name


def test_region_folder_gets_the_packaged_header():
    assert host_files(IMAGE)["hetc_ge.h"] == HEADER.read_text()


# ---- hetc_ge.h matches the real CANN signatures ------------------------------------------------------

def test_ge_declarations_mangle_to_the_symbols_ort_imports(builds, ort_imports):
    imports = ge_symbols(undefined(builds["probe.o"]))
    declared = set(re.findall(r"\b(aclgrph\w+)\s*\(", HEADER.read_text()))
    called = {ge_function(s) for s in imports}
    assert declared == {n for n in called if n.startswith("aclgrph")}
    assert imports <= ort_imports, imports - ort_imports
    # ORT imports exactly these five graph-engine / parser functions, with these signatures
    assert {s for s in ort_imports if "aclgrph" in s} == {s for s in imports if "aclgrph" in s}


def test_a_wrong_declaration_is_caught(builds, ort_imports):
    wrong = {s for s in undefined(builds["wrong.o"]) if "aclgrph" in s}
    assert len(wrong) == 2 and not wrong & ort_imports
    # ...while the same functions declared right (by hetc_ge.h) are found
    right = {s for s in undefined(builds["probe.o"]) if "ParseONNXFromMem" in s or "BuildInitialize" in s}
    assert len(right) == 2 and right <= ort_imports


def test_hetc_ge_h_with_full_headers(builds):
    """With a toolkit's full ge_ir_build.h and parser/onnx_parser.h, hetc_ge.h declares nothing
    itself (no redefinition of ModelBufferData) and host.cc binds to the same symbols."""
    full = ge_symbols(undefined(builds["full_headers.o"]))
    assert full == ge_symbols(undefined(builds[f"{PAIR.symbol}.o"]))


# ---- host.cc runs (against the stand-in runtime) -------------------------------------------------------

def _library(builds: Builds, name: str, files: dict[str, str]) -> tuple[object, Path]:
    """PAIR's host.o + the stub as ``<name>/lib<symbol>.so`` next to ``files``; its function."""
    folder = write_region(PAIR, builds.root / "run" / name)
    for rel, text in files.items():
        (folder / rel).write_text(text)
    lib = folder / f"lib{PAIR.symbol}.so"
    tvm_ffi_lib = Path(tvm_ffi.libinfo.find_libtvm_ffi()).parent
    cxx("-shared", builds[f"{PAIR.symbol}.o"], builds["stub.o"], "-o", lib, f"-L{tvm_ffi_lib}", "-ltvm_ffi",
        "-ldl", cwd=folder)
    return tvm_ffi.load_module(lib).get_function(PAIR.symbol), lib


def _log(lib: Path) -> list[str]:
    import ctypes

    fn = ctypes.CDLL(str(lib)).hetc_stub_log
    fn.restype = ctypes.c_char_p
    return fn().decode().splitlines()


def _call(fn, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    out = np.zeros((2, 8), np.float32), np.zeros((2, 4), np.int32)
    fn(*(tvm_ffi.from_dlpack(x) for x in (a, b, *out)))
    return out


A = np.arange(16, dtype=np.float32).reshape(2, 8) / 3
B = np.arange(8, dtype=np.int32).reshape(2, 4) * -7


def test_runs_model_om_in_destination_passing_style(builds, monkeypatch):
    monkeypatch.setenv("HETC_ASCEND_DEVICE", "3")
    fn, lib = _library(builds, "om", {"model.om": "inputs 64 32\noutputs 64 32\n", "model.onnx": "not used"})
    for _ in range(2):
        total, index = _call(fn, A, B)
        np.testing.assert_array_equal(total, A)  # the stub copies input j to output j
        np.testing.assert_array_equal(index, B)
    log = _log(lib)
    assert log[:3] == ["aclInit", "aclrtSetDevice 3", f"aclmdlLoadFromFile {lib.parent}/model.om"]
    assert log.count("aclmdlExecuteAsync") == 2 and "aclmdlLoadFromMem" not in log  # set up once
    assert log[-5:] == ["aclrtMemcpy to device 64", "aclrtMemcpy to device 32", "aclmdlExecuteAsync",
                        "aclrtMemcpy to host 64", "aclrtMemcpy to host 32"]


def test_builds_model_onnx_with_the_graph_engine(builds, monkeypatch):
    monkeypatch.setenv("HETC_ASCEND_SAVE_OM", "1")
    model = "inputs 64 32\noutputs 64 32\n"
    fn, lib = _library(builds, "onnx", {"model.onnx": model})
    total, index = _call(fn, A, B)
    np.testing.assert_array_equal(total, A)
    np.testing.assert_array_equal(index, B)
    log = _log(lib)
    assert log[:2] == ["aclInit", "aclrtSetDevice 0"]
    assert log[2:8] == ["aclgrphBuildInitialize ge.socVersion=Ascend910B1", f"aclgrphParseONNXFromMem {len(model)}",
                        "aclgrphBuildModel input_shape=a:2,8;b:2,4", f"aclgrphSaveModel {lib.parent}/model",
                        "aclmdlLoadFromMem", "aclgrphBuildFinalize"]
    assert (lib.parent / "model.om").read_text() == model


def test_batch_gears(builds):
    # largest gear 4: 4x the region's bytes (batch 2); the gear set is the region's batch
    fn, lib = _library(builds, "gears", {"model.om": "inputs 128 64\noutputs 128 64\ngears 1 2 4\n"})
    total, index = _call(fn, A, B)
    np.testing.assert_array_equal(total, A)
    np.testing.assert_array_equal(index, B)
    assert "aclmdlSetDynamicBatchSize 2 2" in _log(lib)


def test_dynamic_dims_select_the_gear_of_each_call(builds):
    """A region with symbolic dims: each call sets the gear its inputs match
    (aclmdlSetInputDynamicDims with the inputs' dims) and copies only the bytes of that shape; a
    shape that matches no gear is a one-line error naming the dims and the gears."""
    folder = write_region(DYN, builds.root / "run" / "dims")
    (folder / "model.om").write_text("inputs 64 32\noutputs 64 32\ndimgears 4\n")  # the largest gear: (2, 4)
    lib = folder / f"lib{DYN.symbol}.so"
    tvm_ffi_lib = Path(tvm_ffi.libinfo.find_libtvm_ffi()).parent
    cxx("-shared", builds[f"{DYN.symbol}.o"], builds["stub.o"], "-o", lib, f"-L{tvm_ffi_lib}", "-ltvm_ffi", "-ldl",
        cwd=folder)
    fn = tvm_ffi.load_module(lib).get_function(DYN.symbol)

    def call(batch, seq):
        a = np.arange(batch * 8, dtype=np.float32).reshape(batch, 8)
        b = np.arange(batch * seq, dtype=np.int32).reshape(batch, seq)
        out = np.zeros_like(a), np.zeros_like(b)
        fn(*(tvm_ffi.from_dlpack(x) for x in (a, b, *out)))
        return a, b, out

    a, b, (total, index) = call(2, 4)
    np.testing.assert_array_equal(total, a)
    np.testing.assert_array_equal(index, b)
    call(1, 2)
    log = _log(lib)
    assert "aclmdlSetInputDynamicDims 2 2,8,2,4" in log and "aclmdlSetInputDynamicDims 2 1,8,1,2" in log
    assert log[-5:] == ["aclrtMemcpy to device 32", "aclrtMemcpy to device 8", "aclmdlExecuteAsync",
                        "aclrtMemcpy to host 32", "aclrtMemcpy to host 8"]
    with pytest.raises(ValueError, match=r"inputs a \(1, 8\); b \(1, 3\) match no gear: the region is built for "
                                         r"\(batch, seq\) in \(1, 2\), \(1, 4\), \(2, 2\), \(2, 4\)"):
        call(1, 3)
    text = (folder / "build.sh").read_text()
    assert "--dynamic_dims=1,1,2;1,1,4;2,2,2;2,2,4" in text and "--input_format=ND" in text
    assert "a:-1,8;b:-1,-1" in text


def test_checks_and_errors(builds, monkeypatch):
    fn, lib = _library(builds, "errors", {"model.om": "inputs 64 32\noutputs 64 32\n"})
    with pytest.raises(ValueError, match=r"input a must have shape \(2, 8\), got \(8, 2\)"):
        _call(fn, A.reshape(8, 2), B)
    with pytest.raises(TypeError, match="input b must be int32"):
        _call(fn, A, B.astype(np.int64))
    with pytest.raises(ValueError, match="input a must be contiguous"):
        _call(fn, np.asfortranarray(A), B)
    assert _log(lib) == []  # checked before anything touches the device

    monkeypatch.setenv("STUB_FAIL", "aclmdlLoadFromFile")
    with pytest.raises(RuntimeError, match=f"{PAIR.symbol}: aclmdlLoadFromFile failed with AscendCL error 507011: "
                                           "stub error message"):
        _call(fn, A, B)
    assert _log(lib)[-1] == "aclrtDestroyStream"  # the failed setup was released
    monkeypatch.setenv("STUB_FAIL", "aclmdlExecuteAsync")
    with pytest.raises(RuntimeError, match="aclmdlExecuteAsync failed"):
        _call(fn, A, B)
    monkeypatch.delenv("STUB_FAIL")
    np.testing.assert_array_equal(_call(fn, A, B)[0], A)  # the model stayed loaded
    assert sum(line.startswith("aclmdlLoadFromFile") for line in _log(lib)) == 2


def test_missing_model(builds):
    fn, lib = _library(builds, "empty", {})
    (lib.parent / "model.onnx").unlink(missing_ok=True)
    with pytest.raises(RuntimeError, match="found neither model.om nor model.onnx"):
        _call(fn, A, B)


def test_invalid_specs():
    with pytest.raises(ValueError, match="not a C identifier"):
        host_files(RegionSpec("ascend-region", "r", IMAGE.inputs, IMAGE.outputs, "Ascend910B1"))
    with pytest.raises(ValueError, match="dtype complex64"):
        host_files(RegionSpec("r", "r", (TensorIO("x", "complex64", (2,)),), IMAGE.outputs, "Ascend910B1"))
    with pytest.raises(ValueError, match="input_shape"):
        host_files(RegionSpec("r", "r", (TensorIO("x:0", "float32", (2,)),), IMAGE.outputs, "Ascend910B1"))


def _toolkit(root: Path, include: Path, stub: Path) -> Path:
    """A stand-in CANN toolkit: the public headers, and the stub runtime as libascendcl.so (the
    other libraries build.sh links are empty)."""
    (root / "lib64").mkdir(parents=True)
    (root / "include").symlink_to(include)
    cxx(*cxx_flags(include, stub.parent), "-shared", stub, "-o", root / "lib64" / "libascendcl.so", cwd=root)
    for name in ("ge_compiler", "graph", "fmk_onnx_parser"):
        cxx("-shared", "-fPIC", "-x", "c++", "/dev/null", "-o", root / "lib64" / f"lib{name}.so", cwd=root)
    return root


# ---- build.sh ---------------------------------------------------------------------------------------------

FAKE_TOOL = """\
#!/bin/sh
printf '%s\\n' "$@" > "$FAKE_LOG/$(basename "$0").args"
if [ "$(basename "$0")" = atc ]; then : > "${FAKE_ATC_OUTPUT:-model.om}"; fi
"""


def _run_build(folder: Path, tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, dict[str, list[str]]]:
    fake = tmp_path / "fakebin"
    fake.mkdir(exist_ok=True)
    for tool in ("atc", "g++"):
        (fake / tool).write_text(FAKE_TOOL)
        (fake / tool).chmod(0o755)
    logs = tmp_path / "logs"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir()
    base = {k: v for k, v in os.environ.items() if k not in ("CXX", "DYNAMIC_BATCH", "SKIP_ATC", "ASCEND_TOOLKIT_HOME")}
    proc = subprocess.run(["bash", str(folder / "build.sh")], check=False, capture_output=True, text=True, timeout=60,
                          env={**base, "PATH": f"{fake}{os.pathsep}{base['PATH']}", "FAKE_LOG": str(logs),
                               "PYTHON": sys.executable, **env})
    return proc, {p.stem: p.read_text().splitlines() for p in logs.glob("*.args")}


def test_build_sh_syntax(tmp_path):
    for spec in SPECS:
        proc = subprocess.run(["bash", "-n", str(write_region(spec, tmp_path / spec.name) / "build.sh")],
                              check=False, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


def test_build_sh_needs_the_toolkit(tmp_path):
    proc, calls = _run_build(write_region(IMAGE, tmp_path / "r"), tmp_path)
    assert proc.returncode != 0 and not calls
    assert len(proc.stderr.strip().splitlines()) == 1 and "ASCEND_TOOLKIT_HOME is not set" in proc.stderr


def _fake_toolkit(tmp_path) -> Path:
    """An empty ASCEND_TOOLKIT_HOME for build.sh runs whose atc and g++ are stubs."""
    toolkit = tmp_path / "toolkit"
    (toolkit / "lib64").mkdir(parents=True)
    return toolkit


def test_build_sh_runs_atc_and_gxx(tmp_path):
    toolkit = _fake_toolkit(tmp_path)
    folder = write_region(IMAGE, tmp_path / "r")
    proc, calls = _run_build(folder, tmp_path, ASCEND_TOOLKIT_HOME=str(toolkit))
    assert proc.returncode == 0, proc.stderr
    assert calls["atc"] == ["--framework=5", "--model=model.onnx", "--output=model", "--soc_version=Ascend910B1",
                            "--input_format=NCHW", "--input_shape=images:1,3,224,224"]
    gxx = calls["g++"]
    assert gxx[:5] == ["-std=c++17", "-O2", "-shared", "-fPIC", "-I."]
    assert f"-I{toolkit}/include" in gxx and f"-I{tvm_ffi.libinfo.find_include_path()}" in gxx
    assert gxx[gxx.index("-o") + 1] == f"lib{IMAGE.symbol}.so" and "host.cc" in gxx
    libs = [a for a in gxx if a.startswith("-l")]
    assert libs == ["-lascendcl", "-lge_compiler", "-lgraph", "-lfmk_onnx_parser", "-ltvm_ffi", "-ldl"]
    assert (folder / "model.om").exists()

    # batch gears; libgraph_base where the toolkit has it
    (toolkit / "lib64" / "libgraph_base.so").touch()
    proc, calls = _run_build(folder, tmp_path, ASCEND_TOOLKIT_HOME=str(toolkit), DYNAMIC_BATCH="1,2,4,8")
    assert proc.returncode == 0, proc.stderr
    assert calls["atc"][-2:] == ["--input_shape=images:-1,3,224,224", "--dynamic_batch_size=1,2,4,8"]
    assert "-lgraph_base" in calls["g++"]

    proc, calls = _run_build(folder, tmp_path, ASCEND_TOOLKIT_HOME=str(toolkit), DYNAMIC_BATCH="1,two")
    assert proc.returncode == 1 and "DYNAMIC_BATCH" in proc.stderr and not calls


def test_build_sh_two_inputs(tmp_path):
    toolkit = tmp_path / "toolkit"
    toolkit.mkdir()
    folder = write_region(PAIR, tmp_path / "r")
    # an ATC that appends _<os>_<arch> to the model's name
    proc, calls = _run_build(folder, tmp_path, ASCEND_TOOLKIT_HOME=str(toolkit), DYNAMIC_BATCH="2,4",
                             FAKE_ATC_OUTPUT="model_linux_x86_64.om")
    assert proc.returncode == 0, proc.stderr
    assert calls["atc"][3:] == ["--soc_version=Ascend910B1", "--input_format=ND", "--input_shape=a:-1,8;b:-1,4",
                                "--dynamic_batch_size=2,4"]
    assert (folder / "model.om").exists() and not (folder / "model_linux_x86_64.om").exists()
    proc, calls = _run_build(folder, tmp_path, ASCEND_TOOLKIT_HOME=str(toolkit), SKIP_ATC="1")
    assert proc.returncode == 0 and set(calls) == {"g++"}


def test_build_sh_builds_a_working_library(builds, tmp_path):
    """build.sh with the real g++ against the stand-in toolkit: the library it builds loads (finding
    libascendcl.so through its rpath) and runs model.om."""
    toolkit = builds["toolkit"]
    folder = write_region(PAIR, tmp_path / "region")
    (folder / "model.om").write_text("inputs 64 32\noutputs 64 32\n")
    env = {k: v for k, v in os.environ.items() if k not in ("CXX", "DYNAMIC_BATCH")}
    proc = subprocess.run(["bash", str(folder / "build.sh")], check=False, capture_output=True, text=True, timeout=120,
                          env={**env, "ASCEND_TOOLKIT_HOME": str(toolkit), "SKIP_ATC": "1", "PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr
    lib = folder / f"lib{PAIR.symbol}.so"
    assert proc.stdout.strip() == f"build.sh: built {lib}"
    total, index = _call(tvm_ffi.load_module(lib).get_function(PAIR.symbol), A, B)
    np.testing.assert_array_equal(total, A)
    np.testing.assert_array_equal(index, B)


def test_build_sh_passes_the_gears_of_symbolic_dims_to_atc(tmp_path):
    toolkit = _fake_toolkit(tmp_path)
    folder = write_region(DYN, tmp_path / "dyn")
    proc, calls = _run_build(folder, tmp_path, ASCEND_TOOLKIT_HOME=str(toolkit))
    assert proc.returncode == 0, proc.stderr
    # per gear, the size of every -1 of --input_shape in order: a's batch, b's batch and seq
    assert calls["atc"][-3:] == ["--input_format=ND", "--input_shape=a:-1,8;b:-1,-1",
                                 "--dynamic_dims=1,1,2;1,1,4;2,2,2;2,2,4"]
    proc, _ = _run_build(folder, tmp_path, ASCEND_TOOLKIT_HOME=str(toolkit), DYNAMIC_BATCH="1,2")
    assert proc.returncode == 1 and "gears were chosen at compile time" in proc.stderr
    batch = RegionSpec("ascend_region4_0123", "ascend_region4", (TensorIO("x", "float32", ("batch", 8)),),
                       (TensorIO("y", "float32", ("batch", 4)),), "Ascend910B1", dims=("batch",),
                       gears=((1,), (8,), (32,)), dynamic="batch")
    proc, calls = _run_build(write_region(batch, tmp_path / "batch"), tmp_path, ASCEND_TOOLKIT_HOME=str(toolkit))
    assert proc.returncode == 0, proc.stderr
    assert calls["atc"][-2:] == ["--input_shape=x:-1,8", "--dynamic_batch_size=1,8,32"]
