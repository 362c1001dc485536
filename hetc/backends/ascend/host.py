"""The host program and build files of an Ascend region: the folder ``ascend/<spec.name>/`` of an
artifact, next to the region's ONNX subgraph (``spec.onnx_file``).

``host_files(spec)`` returns, by path relative to that folder:

- ``host.cc``: a C++17 shared library that exports one TVM-FFI function, ``spec.symbol``, in
  destination-passing style (the region's inputs, then its preallocated outputs: contiguous CPU
  tensors of the spec's dtypes and shapes). Its first call sets up AscendCL on device
  ``$HETC_ASCEND_DEVICE`` (default 0) and loads the model from the library's own folder:
  ``model.om`` if ATC built one, else ``spec.onnx_file`` compiled in-process by the graph engine
  (``aclgrphParseONNXFromMem``, ``aclgrphBuildModel``), as ONNX Runtime's CANN execution provider
  does (``HETC_ASCEND_SAVE_OM=1`` keeps that build as ``model.om``). Every call copies the inputs
  to the NPU, runs the model and copies the outputs back.
- ``hetc_ge.h``: the CANN declarations host.cc uses (``cann/hetc_ge.h``; it fills in what public
  header copies that lack the graph-engine build API and ONNX parser leave out).
- ``build.sh``: on a machine with the CANN toolkit (``$ASCEND_TOOLKIT_HOME``), ATC compiles the
  subgraph into ``model.om`` (batch gears with ``DYNAMIC_BATCH=1,2,4,8``; ``SKIP_ATC=1`` skips it)
  and g++ builds ``lib<spec.symbol>.so``. Write it executable, or run it with ``bash``.
"""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path
from string import Template

from .spec import RegionSpec, TensorIO

HEADER = Path(__file__).with_name("cann") / "hetc_ge.h"

# numpy dtype name -> DLPack type code and bits (one lane), as TVM-FFI tensors carry them
_DLPACK = {
    "float32": ("kDLFloat", 32), "float16": ("kDLFloat", 16),
    "int64": ("kDLInt", 64), "int32": ("kDLInt", 32), "int8": ("kDLInt", 8),
    "uint8": ("kDLUInt", 8), "bool": ("kDLBool", 8),
}

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SOC = re.compile(r"[A-Za-z0-9_.\-]+")


def host_files(spec: RegionSpec) -> dict[str, str]:
    """``host.cc``, ``hetc_ge.h`` and ``build.sh`` of the region (see the module docstring)."""
    _check(spec)
    return {"host.cc": _host_cc(spec), "hetc_ge.h": HEADER.read_text(), "build.sh": _build_sh(spec)}


def _check(spec: RegionSpec) -> None:
    if not _IDENTIFIER.fullmatch(spec.symbol):
        raise ValueError(f"Ascend region symbol {spec.symbol!r} is not a C identifier")
    if not _SOC.fullmatch(spec.soc_version):
        raise ValueError(f"invalid soc_version {spec.soc_version!r}")
    if not spec.outputs:
        raise ValueError(f"Ascend region {spec.name} has no outputs")
    for t in spec.inputs + spec.outputs:
        if t.dtype not in _DLPACK:
            raise ValueError(f"{spec.name}: {t.name} has dtype {t.dtype}; the Ascend host program supports "
                             f"{', '.join(_DLPACK)}")
        if not t.name or any(isinstance(d, int) and d < 0 for d in t.shape) or (
                not spec.dynamic and not all(isinstance(d, int) for d in t.shape)):
            raise ValueError(f"{spec.name}: tensor {t.name!r} {t.shape} needs a name and a static shape "
                             "(or symbolic dims with gears)")
    if spec.dynamic not in ("", "batch", "dims") or (spec.dynamic and (len(spec.gears) < 2 or any(
            len(g) != len(spec.dims) for g in spec.gears))):
        raise ValueError(f"{spec.name}: dynamic {spec.dynamic!r} needs two or more gears of {spec.dims}")
    for t in spec.inputs:  # input_shape is "name:d0,d1;name2:..."
        if any(c in t.name for c in ";:,"):
            raise ValueError(f"{spec.name}: input name {t.name!r} has one of ;:, (ATC's --input_shape syntax)")


def _input_shape(inputs: tuple[TensorIO, ...], dynamic_batch: bool = False) -> str:
    """The graph engine's / ATC's input_shape text: ``name:d0,d1;name2:...`` (the leading dims -1
    for ``dynamic_batch``)."""
    def dims(t: TensorIO) -> str:
        shape = [-1, *t.shape[1:]] if dynamic_batch and t.shape else list(t.shape)
        return ",".join(str(d) if isinstance(d, int) else "-1" for d in shape)  # symbolic: -1 (gears)
    return ";".join(f"{t.name}:{dims(t)}" for t in inputs)


def _c_string(text: str) -> str:
    """``text`` as a C string literal (anything but printable ASCII as octal escapes)."""
    out = []
    for byte in text.encode():
        ch = chr(byte)
        out.append(ch if 32 <= byte < 127 and ch not in '"\\?' else f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _comment(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_ .,:;()<>=+\-/\[\]]", "?", text)[:120]


def _tensor_spec(t: TensorIO, spec: RegionSpec) -> str:
    """A TensorSpec initializer: symbolic dims are -1, and the bytes those of the largest gear."""
    code, bits = _DLPACK[t.dtype]
    shapes = [spec.shape_at(t, g) for g in spec.gears] if spec.dynamic else [t.shape]
    nbytes = max(math.prod(s) for s in shapes) * bits // 8
    dims = [d if isinstance(d, int) else -1 for d in t.shape]
    shape = "(" + ", ".join(_comment(str(d)) for d in t.shape) + ("," if len(t.shape) == 1 else "") + ")"
    return (f"    {{{_c_string(t.name)}, \"{t.dtype}\", {code}, {bits}, {{{', '.join(map(str, dims))}}}, "
            f"\"{shape}\", {nbytes}}},")


def _gear_table(spec: RegionSpec) -> str:
    """Per gear, the region's input dims concatenated (what aclmdlSetInputDynamicDims takes)."""
    rows = [", ".join(str(d) for t in spec.inputs for d in spec.shape_at(t, g)) for g in spec.gears]
    return "\n".join(f"    {{{row}}}," for row in rows)


def _host_cc(spec: RegionSpec) -> str:
    params = [f"tvm::ffi::TensorView in{i}" for i in range(len(spec.inputs))]
    params += [f"tvm::ffi::TensorView out{j}" for j in range(len(spec.outputs))]
    return _HOST_CC.substitute(
        name=_comment(spec.name), symbol=spec.symbol, soc=_c_string(spec.soc_version),
        onnx_file=_c_string(spec.onnx_file), onnx_comment=_comment(spec.onnx_file),
        input_shape=_c_string(_input_shape(spec.inputs)),
        inputs="\n".join(_tensor_spec(t, spec) for t in spec.inputs),
        outputs="\n".join(_tensor_spec(t, spec) for t in spec.outputs),
        dynamic={"": 0, "batch": 1, "dims": 2}[spec.dynamic], gear_table=_gear_table(spec) if spec.dynamic else "",
        gear_dims=_c_string(", ".join(spec.dims)),
        gear_list=_c_string(_gear_text(spec) if spec.dynamic else ""),
        params=",\n           ".join(params), in_args=", ".join(f"in{i}" for i in range(len(spec.inputs))),
        out_args=", ".join(f"out{j}" for j in range(len(spec.outputs))))


def _gear_text(spec: RegionSpec, limit: int = 12) -> str:
    """The gears as "(batch, seq) in (1, 16), (1, 32), ..." for error messages."""
    rows = ["(" + ", ".join(map(str, g)) + ")" for g in spec.gears]
    shown = ", ".join(rows[:limit]) + (f", ... ({len(rows)} gears)" if len(rows) > limit else "")
    return f"({', '.join(spec.dims)}) in {shown}"


def atc_gears(spec: RegionSpec) -> list[str]:
    """ATC's options for the region's gears: ``--dynamic_batch_size=1,2,4`` or
    ``--dynamic_dims=v,v;v,v`` (per gear, the size of every -1 of --input_shape, in order)."""
    if spec.dynamic == "batch":
        return [f"--dynamic_batch_size={','.join(str(g[0]) for g in spec.gears)}"]
    if spec.dynamic == "dims":
        rows = [",".join(str(spec.shape_at(t, g)[axis]) for t in spec.inputs for axis, d in enumerate(t.shape)
                         if isinstance(d, str)) for g in spec.gears]
        return [f"--dynamic_dims={';'.join(rows)}"]
    return []


def _build_sh(spec: RegionSpec) -> str:
    four_d = bool(spec.inputs) and all(len(t.shape) == 4 for t in spec.inputs) and spec.dynamic != "dims"
    if spec.dynamic:
        dynamic = """\
    echo "build.sh: this region's gears were chosen at compile time (hetc compile --gears);" \\
      "DYNAMIC_BATCH does not apply" >&2
    exit 1"""
    elif any(t.shape for t in spec.inputs):
        dynamic = f"""\
    if ! [[ "$DYNAMIC_BATCH" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]]; then
      echo "build.sh: DYNAMIC_BATCH must list batch sizes, like 1,2,4,8" >&2
      exit 1
    fi
    input_shape={shlex.quote(_input_shape(spec.inputs, dynamic_batch=True))}
    gears=(--dynamic_batch_size="$DYNAMIC_BATCH")"""
    else:
        dynamic = """\
    echo "build.sh: DYNAMIC_BATCH needs inputs with a batch dim; this region has none" >&2
    exit 1"""
    return _BUILD_SH.substitute(
        name=_comment(spec.name), symbol=spec.symbol, soc=shlex.quote(spec.soc_version),
        onnx_file=shlex.quote(spec.onnx_file), input_format="NCHW" if four_d else "ND",
        static_shape=shlex.quote(_input_shape(spec.inputs)), dynamic=dynamic,
        gears=" ".join(shlex.quote(o) for o in atc_gears(spec)))


_HOST_CC = Template("""\
// Host program of the Ascend region $name (generated by hetc).
// Runs the region on an Ascend NPU through AscendCL: it loads model.om (built offline by ATC, see
// build.sh) from this library's folder, or else builds $onnx_comment there with the graph engine.
// Exports the TVM-FFI function $symbol in destination-passing style: the inputs, then the
// preallocated outputs, contiguous CPU tensors of the dtypes and shapes below.
// Build: ./build.sh (g++ -std=c++17 -O2 -shared -fPIC host.cc -I<CANN include> -I<TVM-FFI includes>
//        -lascendcl -lge_compiler -lgraph -lfmk_onnx_parser -ltvm_ffi)
#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>

#include "hetc_ge.h"

namespace {

// ---- The region's interface ----------------------------------------------------------------------

constexpr const char* kSymbol = "$symbol";
constexpr const char* kSocVersion = $soc;
constexpr const char* kOnnxFile = $onnx_file;
constexpr const char* kInputShape = $input_shape;  // the graph engine's INPUT_SHAPE option

struct TensorSpec {
  const char* name;        // in the region's ONNX graph
  const char* dtype;       // numpy name
  uint8_t code;            // DLPack type code (one lane)
  uint8_t bits;
  std::vector<int64_t> shape;
  const char* shape_text;
  size_t nbytes;
};

const std::vector<TensorSpec> kInputs = {
$inputs
};
const std::vector<TensorSpec> kOutputs = {
$outputs
};

// Symbolic dims (-1 above): the model is built for these gears (build.sh passes them to ATC), and
// every call selects the one its inputs match. 0: static, 1: --dynamic_batch_size
// (aclmdlSetDynamicBatchSize), 2: --dynamic_dims (aclmdlSetInputDynamicDims).
constexpr int kDynamic = $dynamic;
constexpr const char* kGearDims = $gear_dims;
constexpr const char* kGearList = $gear_list;
const std::vector<std::vector<int64_t>> kGears = {  // per gear: the inputs' dims, concatenated
$gear_table
};

// ---- Errors ----------------------------------------------------------------------------------------

std::string AclMessage() {
  const char* msg = aclGetRecentErrMsg();
  return msg != nullptr && *msg != '\\0' ? std::string(": ") + msg : std::string();
}

void Check(aclError err, const char* what) {
  if (err != ACL_SUCCESS) {
    TVM_FFI_THROW(RuntimeError) << kSymbol << ": " << what << " failed with AscendCL error " << err << AclMessage();
  }
}

void CheckGe(ge::graphStatus status, const char* what) {
  if (status != ge::GRAPH_SUCCESS) {
    TVM_FFI_THROW(RuntimeError) << kSymbol << ": " << what << " failed with graph engine status " << status
                                << AclMessage();
  }
}

// ---- Files -------------------------------------------------------------------------------------------

// The folder of this library: the region's folder ascend/<name>/.
std::string LibraryDir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&LibraryDir), &info) == 0 || info.dli_fname == nullptr) {
    TVM_FFI_THROW(RuntimeError) << kSymbol << ": dladdr cannot find the path of this library";
  }
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

bool FileExists(const std::string& path) { return std::ifstream(path, std::ios::binary).good(); }

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) TVM_FFI_THROW(RuntimeError) << kSymbol << ": cannot read " << path;
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

int32_t DeviceId() {
  const char* env = std::getenv("HETC_ASCEND_DEVICE");
  if (env == nullptr || *env == '\\0') return 0;
  char* end = nullptr;
  long id = std::strtol(env, &end, 10);
  if (*end != '\\0' || id < 0 || id > INT32_MAX) {
    TVM_FFI_THROW(ValueError) << kSymbol << ": HETC_ASCEND_DEVICE=" << env << " is not a device number";
  }
  return static_cast<int32_t>(id);
}

// ---- The model on the NPU ------------------------------------------------------------------------

// Everything the calls share. Built once, on the first call, and then kept for the life of the
// process: AscendCL must not be torn down from static destructors at exit (their order relative to
// AscendCL's own is unknown), so only a failed setup releases what it made, here.
struct Model {
  aclrtContext context = nullptr;
  aclrtStream stream = nullptr;
  bool loaded = false;
  uint32_t id = 0;
  std::shared_ptr<uint8_t> om;  // the in-process build, kept while the model is loaded
  aclmdlDesc* desc = nullptr;
  aclmdlDataset* inputs = nullptr;
  aclmdlDataset* outputs = nullptr;
  std::vector<void*> device_buffers;
  std::vector<void*> input_data, output_data;  // the device buffers of kInputs[i], kOutputs[j]
  std::vector<size_t> input_capacity;
  size_t gear_index = SIZE_MAX;  // the model input that takes the gear (ACL_DYNAMIC_TENSOR_NAME)

  ~Model() {
    if (context != nullptr) aclrtSetCurrentContext(context);
    if (loaded) aclmdlUnload(id);
    DestroyDataset(inputs);
    DestroyDataset(outputs);
    if (desc != nullptr) aclmdlDestroyDesc(desc);
    for (void* data : device_buffers) aclrtFree(data);
    if (stream != nullptr) aclrtDestroyStream(stream);
  }

  static void DestroyDataset(aclmdlDataset* dataset) {
    if (dataset == nullptr) return;
    for (size_t i = 0; i < aclmdlGetDatasetNumBuffers(dataset); i++) {
      aclDestroyDataBuffer(aclmdlGetDatasetBuffer(dataset, i));
    }
    aclmdlDestroyDataset(dataset);
  }

  // Allocates `size` bytes on the device as the next buffer of `dataset`.
  void* AddBuffer(aclmdlDataset* dataset, size_t size) {
    void* data = nullptr;
    if (size > 0) {
      Check(aclrtMalloc(&data, size, ACL_MEM_MALLOC_HUGE_FIRST), "aclrtMalloc");
      device_buffers.push_back(data);
    }
    aclDataBuffer* buffer = aclCreateDataBuffer(data, size);
    if (buffer == nullptr) TVM_FFI_THROW(RuntimeError) << kSymbol << ": aclCreateDataBuffer failed" << AclMessage();
    aclError err = aclmdlAddDatasetBuffer(dataset, buffer);
    if (err != ACL_SUCCESS) aclDestroyDataBuffer(buffer);
    Check(err, "aclmdlAddDatasetBuffer");
    return data;
  }
};

// Compiles the ONNX subgraph with the graph engine and loads the result, as ONNX Runtime's CANN
// execution provider does (cann_graph.cc). Needs the CANN environment (set_env.sh).
void BuildAndLoad(const std::string& dir, Model& m) {
  const std::string onnx = ReadFile(dir + "/" + kOnnxFile);
  std::map<ge::AscendString, ge::AscendString> global_options;
  global_options.emplace(ge::ir_option::SOC_VERSION, kSocVersion);
  CheckGe(ge::aclgrphBuildInitialize(global_options), "aclgrphBuildInitialize");
  // aclgrphBuildFinalize must run on the thread that initialized, also when a step below fails.
  struct Finalize {
    ~Finalize() { ge::aclgrphBuildFinalize(); }
  } finalize;
  ge::Graph graph(kSymbol);
  std::map<ge::AscendString, ge::AscendString> parser_params;
  CheckGe(ge::aclgrphParseONNXFromMem(onnx.data(), onnx.size(), parser_params, graph), "aclgrphParseONNXFromMem");
  std::map<ge::AscendString, ge::AscendString> build_options;
  build_options.emplace(ge::ir_option::INPUT_SHAPE, kInputShape);
  ge::ModelBufferData model;
  CheckGe(ge::aclgrphBuildModel(graph, build_options, model), "aclgrphBuildModel");
  const char* save = std::getenv("HETC_ASCEND_SAVE_OM");
  if (save != nullptr && std::string(save) == "1") {
    CheckGe(ge::aclgrphSaveModel((dir + "/model").c_str(), model), "aclgrphSaveModel");  // writes model.om
  }
  Check(aclmdlLoadFromMem(model.data.get(), model.length, &m.id), "aclmdlLoadFromMem");
  m.loaded = true;
  m.om = model.data;
}

std::unique_ptr<Model> Load() {
  auto m = std::make_unique<Model>();
  aclError init = aclInit(nullptr);  // once per process: another library may have done it
  if (init != ACL_ERROR_REPEAT_INITIALIZE) Check(init, "aclInit");
  Check(aclrtSetDevice(DeviceId()), "aclrtSetDevice");
  Check(aclrtGetCurrentContext(&m->context), "aclrtGetCurrentContext");
  Check(aclrtCreateStream(&m->stream), "aclrtCreateStream");

  const std::string dir = LibraryDir();
  const std::string om = dir + "/model.om";
  if (FileExists(om)) {
    Check(aclmdlLoadFromFile(om.c_str(), &m->id), "aclmdlLoadFromFile");
    m->loaded = true;
  } else if (FileExists(dir + "/" + kOnnxFile)) {
    BuildAndLoad(dir, *m);
  } else {
    TVM_FFI_THROW(RuntimeError) << kSymbol << ": found neither model.om nor " << kOnnxFile << " in " << dir;
  }

  m->desc = aclmdlCreateDesc();
  if (m->desc == nullptr) TVM_FFI_THROW(RuntimeError) << kSymbol << ": aclmdlCreateDesc failed" << AclMessage();
  Check(aclmdlGetDesc(m->desc, m->id), "aclmdlGetDesc");
  // A model built with ATC --dynamic_batch_size has one more input: the batch size.
  // With --dynamic_dims, one more input takes the dims of the gear.
  aclmdlBatch gears{};
  bool dynamic = aclmdlGetDynamicBatch(m->desc, &gears) == ACL_SUCCESS && gears.batchCount > 0;
  size_t dim_gears = 0;
  if (kDynamic == 2 && aclmdlGetInputDynamicGearCount(m->desc, static_cast<size_t>(-1), &dim_gears) == ACL_SUCCESS) {
    dynamic = dynamic || dim_gears > 0;
  }
  if (kDynamic != 0 && !dynamic) {
    TVM_FFI_THROW(RuntimeError) << kSymbol << ": the model in " << dir << " has no gears; the region takes "
                                << kGearDims << " (rebuild model.om with this folder's build.sh)";
  }
  size_t batch_index = SIZE_MAX;
  if (dynamic) Check(aclmdlGetInputIndexByName(m->desc, ACL_DYNAMIC_TENSOR_NAME, &batch_index), "aclmdlGetInputIndexByName");
  m->gear_index = batch_index;
  const size_t num_inputs = aclmdlGetNumInputs(m->desc), num_outputs = aclmdlGetNumOutputs(m->desc);
  if (num_inputs != kInputs.size() + (dynamic ? 1 : 0) || num_outputs != kOutputs.size()) {
    TVM_FFI_THROW(RuntimeError) << kSymbol << ": the model in " << dir << " has " << num_inputs << " inputs and "
                                << num_outputs << " outputs, the region " << kInputs.size() << " and " << kOutputs.size();
  }

  // One device buffer per model input and output; the region's tensors map to them in order.
  m->inputs = aclmdlCreateDataset();
  m->outputs = aclmdlCreateDataset();
  if (m->inputs == nullptr || m->outputs == nullptr) {
    TVM_FFI_THROW(RuntimeError) << kSymbol << ": aclmdlCreateDataset failed" << AclMessage();
  }
  for (size_t i = 0; i < num_inputs; i++) {
    size_t size = aclmdlGetInputSizeByIndex(m->desc, i);
    void* data = m->AddBuffer(m->inputs, size);
    if (i == batch_index) continue;
    const TensorSpec& t = kInputs[m->input_data.size()];
    // a model with batch gears holds the largest batch
    if (dynamic ? size < t.nbytes : size != t.nbytes) {
      TVM_FFI_THROW(RuntimeError) << kSymbol << ": model input " << i << " has " << size << " bytes, the region's "
                                  << t.name << " (" << t.dtype << t.shape_text << ") " << t.nbytes;
    }
    m->input_data.push_back(data);
    m->input_capacity.push_back(size);
  }
  for (size_t j = 0; j < num_outputs; j++) {
    size_t size = aclmdlGetOutputSizeByIndex(m->desc, j);
    const TensorSpec& t = kOutputs[j];
    if (dynamic ? size < t.nbytes : size != t.nbytes) {
      TVM_FFI_THROW(RuntimeError) << kSymbol << ": model output " << j << " has " << size << " bytes, the region's "
                                  << t.name << " (" << t.dtype << t.shape_text << ") " << t.nbytes;
    }
    m->output_data.push_back(m->AddBuffer(m->outputs, size));
  }
  if (dynamic && kDynamic == 0) {  // DYNAMIC_BATCH of a static region: the gear of its batch
    uint64_t batch = kInputs.empty() || kInputs[0].shape.empty() ? 0 : static_cast<uint64_t>(kInputs[0].shape[0]);
    bool found = false;
    for (size_t g = 0; g < gears.batchCount; g++) found = found || gears.batch[g] == batch;
    if (!found) {
      TVM_FFI_THROW(RuntimeError) << kSymbol << ": model.om has no batch gear " << batch
                                  << " (rebuild it with DYNAMIC_BATCH including " << batch << ")";
    }
    Check(aclmdlSetDynamicBatchSize(m->id, m->inputs, batch_index, batch), "aclmdlSetDynamicBatchSize");
  }
  return m;
}

// ---- The exported function ---------------------------------------------------------------------------

std::mutex g_mutex;        // one call at a time: the calls share the device buffers and the stream
Model* g_model = nullptr;  // see Model

char* HostData(const tvm::ffi::TensorView& t) { return static_cast<char*>(t.data_ptr()) + t.byte_offset(); }

void CheckTensor(const tvm::ffi::TensorView& t, const TensorSpec& spec, const char* role) {
  bool same = t.ndim() == static_cast<int32_t>(spec.shape.size());
  for (int32_t axis = 0; same && axis < t.ndim(); axis++) {
    same = spec.shape[axis] < 0 ? t.size(axis) >= 0 : t.size(axis) == spec.shape[axis];  // -1: a symbolic dim
  }
  if (!same) {
    std::ostringstream got;
    for (int32_t axis = 0; axis < t.ndim(); axis++) got << (axis ? ", " : "") << t.size(axis);
    TVM_FFI_THROW(ValueError) << kSymbol << ": " << role << " " << spec.name << " must have shape " << spec.shape_text
                              << ", got (" << got.str() << ")";
  }
  DLDataType dtype = t.dtype();
  if (dtype.code != spec.code || dtype.bits != spec.bits || dtype.lanes != 1) {
    TVM_FFI_THROW(TypeError) << kSymbol << ": " << role << " " << spec.name << " must be " << spec.dtype;
  }
  if (t.device().device_type != kDLCPU) {
    TVM_FFI_THROW(ValueError) << kSymbol << ": " << role << " " << spec.name << " must be on the CPU";
  }
  if (!t.IsContiguous()) TVM_FFI_THROW(ValueError) << kSymbol << ": " << role << " " << spec.name << " must be contiguous";
}

// The bytes of a tensor as called (its symbolic dims at their sizes in this call).
size_t Bytes(const tvm::ffi::TensorView& t, const TensorSpec& spec) {
  size_t n = spec.bits / 8;
  for (int32_t axis = 0; axis < t.ndim(); axis++) n *= static_cast<size_t>(t.size(axis));
  return n;
}

// The gear the inputs' shapes match (their dims, concatenated, as kGears lists them).
size_t SelectGear(const std::vector<tvm::ffi::TensorView>& inputs, std::vector<int64_t>& dims) {
  for (const tvm::ffi::TensorView& t : inputs) {
    for (int32_t axis = 0; axis < t.ndim(); axis++) dims.push_back(t.size(axis));
  }
  for (size_t g = 0; g < kGears.size(); g++) {
    if (kGears[g] == dims) return g;
  }
  std::ostringstream got;
  for (size_t i = 0; i < inputs.size(); i++) {
    got << (i ? "; " : "") << kInputs[i].name << " (";
    for (int32_t axis = 0; axis < inputs[i].ndim(); axis++) got << (axis ? ", " : "") << inputs[i].size(axis);
    got << ")";
  }
  TVM_FFI_THROW(ValueError) << kSymbol << ": inputs " << got.str() << " match no gear: the region is built for "
                            << kGearList << " (hetc compile --gears)";
  return SIZE_MAX;  // not reached
}

void Run(const std::vector<tvm::ffi::TensorView>& inputs, const std::vector<tvm::ffi::TensorView>& outputs) {
  for (size_t i = 0; i < kInputs.size(); i++) CheckTensor(inputs[i], kInputs[i], "input");
  for (size_t j = 0; j < kOutputs.size(); j++) CheckTensor(outputs[j], kOutputs[j], "output");
  std::vector<int64_t> dims;
  if (kDynamic != 0) SelectGear(inputs, dims);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_model == nullptr) g_model = Load().release();
  Model& m = *g_model;
  Check(aclrtSetCurrentContext(m.context), "aclrtSetCurrentContext");  // the calling thread may be a new one
  if (kDynamic == 1) {
    Check(aclmdlSetDynamicBatchSize(m.id, m.inputs, m.gear_index, static_cast<uint64_t>(dims[0])),
          "aclmdlSetDynamicBatchSize");
  } else if (kDynamic == 2) {
    aclmdlIODims gear{};
    if (dims.size() > ACL_MAX_DIM_CNT) TVM_FFI_THROW(ValueError) << kSymbol << ": too many input dims for AscendCL";
    gear.dimCount = dims.size();
    for (size_t k = 0; k < dims.size(); k++) gear.dims[k] = dims[k];
    Check(aclmdlSetInputDynamicDims(m.id, m.inputs, m.gear_index, &gear), "aclmdlSetInputDynamicDims");
  }
  for (size_t i = 0; i < kInputs.size(); i++) {
    size_t nbytes = Bytes(inputs[i], kInputs[i]);
    if (nbytes == 0) continue;
    Check(aclrtMemcpy(m.input_data[i], m.input_capacity[i], HostData(inputs[i]), nbytes,
                      ACL_MEMCPY_HOST_TO_DEVICE), "aclrtMemcpy (host to device)");
  }
  Check(aclmdlExecuteAsync(m.id, m.inputs, m.outputs, m.stream), "aclmdlExecuteAsync");
  Check(aclrtSynchronizeStream(m.stream), "aclrtSynchronizeStream");
  for (size_t j = 0; j < kOutputs.size(); j++) {
    size_t nbytes = Bytes(outputs[j], kOutputs[j]);
    if (nbytes == 0) continue;
    Check(aclrtMemcpy(HostData(outputs[j]), nbytes, m.output_data[j], nbytes,
                      ACL_MEMCPY_DEVICE_TO_HOST), "aclrtMemcpy (device to host)");
  }
}

void Entry($params) {
  Run({$in_args}, {$out_args});
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC($symbol, Entry);
""")

_BUILD_SH = Template("""\
#!/usr/bin/env bash
# Builds the Ascend region $name (generated by hetc) on a machine with the CANN toolkit:
#   1. ATC compiles $onnx_file into the offline model model.om. DYNAMIC_BATCH=1,2,4,8 compiles
#      these batch gears (the leading dim of every input becomes -1); SKIP_ATC=1 skips this step,
#      and the library then builds the ONNX file itself on first use.
#   2. g++ compiles host.cc into lib$symbol.so,
#      which exports the TVM-FFI function $symbol.
# Needs ASCEND_TOOLKIT_HOME (source the toolkit's set_env.sh) and a Python with apache-tvm-ffi
# (PYTHON, default python3); CXX replaces g++.
set -euo pipefail
cd "$$(dirname "$${BASH_SOURCE[0]}")"

if [ -z "$${ASCEND_TOOLKIT_HOME:-}" ]; then
  echo "build.sh: ASCEND_TOOLKIT_HOME is not set; source the CANN toolkit's set_env.sh first" >&2
  exit 1
fi

if [ "$${SKIP_ATC:-0}" != 1 ]; then
  input_shape=$static_shape
  gears=($gears)
  if [ -n "$${DYNAMIC_BATCH:-}" ]; then
$dynamic
  fi
  atc=$$(command -v atc || echo "$$ASCEND_TOOLKIT_HOME/bin/atc")
  rm -f model.om
  "$$atc" --framework=5 --model=$onnx_file --output=model --soc_version=$soc \\
    --input_format=$input_format --input_shape="$$input_shape" $${gears[@]+"$${gears[@]}"}
  if [ ! -f model.om ]; then  # some ATC versions add _<os>_<arch> to the name
    for om in model_*.om; do
      if [ -f "$$om" ]; then mv -f -- "$$om" model.om; break; fi
    done
  fi
  if [ ! -f model.om ]; then
    echo "build.sh: atc wrote no model.om" >&2
    exit 1
  fi
fi

python=$${PYTHON:-python3}
# TVM-FFI's include folder, DLPack's include folder and libtvm_ffi's folder, one a line
paths=$$("$$python" -c 'import os, tvm_ffi.libinfo as l; print(l.find_include_path()); \
print(l.find_dlpack_include_path()); print(os.path.dirname(l.find_libtvm_ffi()))')
{ read -r tvm_ffi_include; read -r dlpack_include; read -r tvm_ffi_lib; } <<< "$$paths"
cann_lib="$$ASCEND_TOOLKIT_HOME/lib64"
# libascendcl: AscendCL (aclInit, aclrt*, aclmdl*); libge_compiler: aclgrphBuildInitialize/BuildModel/
# SaveModel/BuildFinalize; libgraph: ge::Graph, ge::AscendString (in libgraph_base where split off);
# libfmk_onnx_parser: aclgrphParseONNXFromMem
cann_libs=(-lascendcl -lge_compiler -lgraph -lfmk_onnx_parser)
if [ -e "$$cann_lib/libgraph_base.so" ]; then cann_libs+=(-lgraph_base); fi
"$${CXX:-g++}" -std=c++17 -O2 -shared -fPIC -I. -I"$$ASCEND_TOOLKIT_HOME/include" -I"$$tvm_ffi_include" \\
  -I"$$dlpack_include" host.cc -o lib$symbol.so -L"$$cann_lib" -Wl,-rpath,"$$cann_lib" "$${cann_libs[@]}" \\
  -L"$$tvm_ffi_lib" -Wl,-rpath,"$$tvm_ffi_lib" -ltvm_ffi -ldl
echo "build.sh: built $$PWD/lib$symbol.so"
""")
