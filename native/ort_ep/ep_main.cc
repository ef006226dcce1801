// The OrtEpFactory / OrtEp / OrtNodeComputeInfo tables of the kompute_dml plugin EP. Each entry
// takes the GIL and calls the matching method of kompute_dml/ort/plugin.py's Factory, Ep or
// Kernel; Python exceptions come back to ORT as ORT_EP_FAIL statuses carrying their message.
#include <cstring>
#include <memory>

#include "ep_common.h"

namespace kdml_ep {

const OrtApi* ort = nullptr;
const OrtEpApi* ep_api = nullptr;

OrtStatus* status_from_python(const char* where) {
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  // bad options or models are the caller's error (ORT raises InvalidArgument, and does not
  // quietly retry on the CPU); the rest is the EP's
  OrtErrorCode code = type != nullptr && PyErr_GivenExceptionMatches(type, PyExc_ValueError) ? ORT_INVALID_ARGUMENT
                                                                                              : ORT_EP_FAIL;
  std::string msg = std::string("kompute_dml EP ") + where + ": ";
  if (type != nullptr) msg += reinterpret_cast<PyTypeObject*>(type)->tp_name;
  if (value != nullptr) {
    Ref s(PyObject_Str(value));
    const char* text = s ? PyUnicode_AsUTF8(s.p) : nullptr;
    if (text != nullptr) msg += std::string(": ") + text;
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  PyErr_Clear();
  return ort->CreateStatus(code, msg.c_str());
}

PyObject* raise_ort(OrtStatus* status) {
  PyErr_SetString(PyExc_RuntimeError, ort->GetErrorMessage(status));
  ort->ReleaseStatus(status);
  return nullptr;
}

namespace {

PyObject* kv_dict(const OrtKeyValuePairs* kv) {
  Ref d(PyDict_New());
  if (kv == nullptr || !d) return d.release();
  const char* const* keys = nullptr;
  const char* const* values = nullptr;
  size_t n = 0;
  ort->GetKeyValuePairs(kv, &keys, &values, &n);
  for (size_t i = 0; i < n; ++i) {
    Ref v(PyUnicode_FromString(values[i] ? values[i] : ""));
    if (!v || PyDict_SetItemString(d.p, keys[i], v.p) != 0) return nullptr;
  }
  return d.release();
}

// A dict of str -> str as OrtKeyValuePairs (caller releases).
OrtKeyValuePairs* kv_pairs(PyObject* dict) {
  OrtKeyValuePairs* kv = nullptr;
  ort->CreateKeyValuePairs(&kv);
  PyObject *k = nullptr, *v = nullptr;
  Py_ssize_t pos = 0;
  while (dict != nullptr && PyDict_Next(dict, &pos, &k, &v)) {
    const char* ks = PyUnicode_AsUTF8(k);
    const char* vs = PyUnicode_AsUTF8(v);
    if (ks != nullptr && vs != nullptr) ort->AddKeyValuePair(kv, ks, vs);
  }
  PyErr_Clear();
  return kv;
}

// The output buffers of one Compute call, handed to Python as `alloc(index, shape)`, which
// allocates ORT's output and returns a writable view of it, so the backend reads its results
// straight into ORT's memory (BackendRep.run's `out`).
struct OutputSink {
  OrtKernelContext* ctx;
  std::vector<void*> data;
};

PyObject* alloc_output(PyObject* self, PyObject* args) {
  auto* sink = static_cast<OutputSink*>(PyCapsule_GetPointer(self, "kdml.sink"));
  Py_ssize_t index = 0;
  PyObject* shape = nullptr;
  if (sink == nullptr || !PyArg_ParseTuple(args, "nO", &index, &shape)) return nullptr;
  if (index < 0 || static_cast<size_t>(index) >= sink->data.size()) {
    PyErr_SetString(PyExc_IndexError, "output index");
    return nullptr;
  }
  Ref seq(PySequence_Fast(shape, "shape must be a sequence"));
  if (!seq) return nullptr;
  std::vector<int64_t> dims;
  for (Py_ssize_t d = 0; d < PySequence_Fast_GET_SIZE(seq.p); ++d) {
    dims.push_back(PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq.p, d)));
    if (PyErr_Occurred()) return nullptr;
  }
  OrtValue* out = nullptr;
  void* dst = nullptr;
  size_t nbytes = 0;
  if (OrtStatus* st = ort->KernelContext_GetOutput(sink->ctx, static_cast<size_t>(index), dims.data(), dims.size(), &out))
    return raise_ort(st);
  if (OrtStatus* st = ort->GetTensorMutableData(out, &dst)) return raise_ort(st);
  if (OrtStatus* st = ort->GetTensorSizeInBytes(out, &nbytes)) return raise_ort(st);
  static char empty[8];
  sink->data[static_cast<size_t>(index)] = dst;
  return PyMemoryView_FromMemory(dst != nullptr ? static_cast<char*>(dst) : empty, static_cast<Py_ssize_t>(nbytes),
                                 PyBUF_WRITE);
}

PyMethodDef alloc_def = {"alloc", alloc_output, METH_VARARGS, "ORT's output buffer `index` of `shape`"};

struct Kernel : OrtNodeComputeInfo {
  PyObject* py;  // kompute_dml.ort.plugin.Kernel
  explicit Kernel(PyObject* k) : OrtNodeComputeInfo{}, py(k) {
    ort_version_supported = KDML_ORT_API;
    CreateState = [](OrtNodeComputeInfo* self, OrtNodeComputeContext*, void** state) noexcept -> OrtStatus* {
      *state = self;
      return nullptr;
    };
    Compute = ComputeImpl;
    ReleaseState = [](OrtNodeComputeInfo*, void*) noexcept {};
  }

  static OrtStatus* ComputeImpl(OrtNodeComputeInfo* self_, void*, OrtKernelContext* ctx) noexcept {
    auto* self = static_cast<Kernel*>(self_);
    size_t nin = 0, nout = 0;
    KDML_RETURN_IF_ERROR(ort->KernelContext_GetInputCount(ctx, &nin));
    KDML_RETURN_IF_ERROR(ort->KernelContext_GetOutputCount(ctx, &nout));
    Gil gil;
    Ref inputs(PyList_New(static_cast<Py_ssize_t>(nin)));
    if (!inputs) return status_from_python("compute");
    static char empty[8];
    for (size_t i = 0; i < nin; ++i) {
      const OrtValue* v = nullptr;
      KDML_RETURN_IF_ERROR(ort->KernelContext_GetInput(ctx, i, &v));
      ONNXTensorElementDataType et;
      std::vector<int64_t> dims;
      KDML_RETURN_IF_ERROR(tensor_shape(v, &et, &dims));
      const void* data = nullptr;
      size_t nbytes = 0;
      KDML_RETURN_IF_ERROR(ort->GetTensorData(v, &data));
      KDML_RETURN_IF_ERROR(ort->GetTensorSizeInBytes(v, &nbytes));
      Ref shape(shape_tuple(dims));
      char* p = data != nullptr ? const_cast<char*>(static_cast<const char*>(data)) : empty;
      Ref mv(PyMemoryView_FromMemory(p, static_cast<Py_ssize_t>(nbytes), PyBUF_READ));
      PyObject* item = mv ? Py_BuildValue("(OiO)", mv.p, static_cast<int>(et), shape.p) : nullptr;
      if (item == nullptr) return status_from_python("compute");
      PyList_SET_ITEM(inputs.p, static_cast<Py_ssize_t>(i), item);
    }
    OutputSink sink{ctx, std::vector<void*>(nout, nullptr)};
    Ref capsule(PyCapsule_New(&sink, "kdml.sink", nullptr));
    Ref alloc(capsule ? PyCFunction_New(&alloc_def, capsule.p) : nullptr);
    if (!alloc) return status_from_python("compute");
    Ref outs(PyObject_CallMethod(self->py, "run", "OO", inputs.p, alloc.p));
    if (!outs) return status_from_python("run");
    if (!PyList_Check(outs.p) || static_cast<size_t>(PyList_GET_SIZE(outs.p)) != nout)
      return ort->CreateStatus(ORT_EP_FAIL, "kompute_dml EP run: wrong number of outputs");
    for (size_t i = 0; i < nout; ++i) {
      Py_buffer buf;
      if (PyObject_GetBuffer(PyList_GET_ITEM(outs.p, i), &buf, PyBUF_C_CONTIGUOUS | PyBUF_ND) != 0)
        return status_from_python("output");
      if (sink.data[i] != nullptr && sink.data[i] == buf.buf) {  // written in place through alloc
        PyBuffer_Release(&buf);
        continue;
      }
      std::vector<int64_t> dims(buf.shape, buf.shape + buf.ndim);
      OrtValue* out = nullptr;
      OrtStatus* st = ort->KernelContext_GetOutput(ctx, i, dims.data(), dims.size(), &out);
      void* dst = nullptr;
      size_t nbytes = 0;
      if (st == nullptr) st = ort->GetTensorMutableData(out, &dst);
      if (st == nullptr) st = ort->GetTensorSizeInBytes(out, &nbytes);
      if (st == nullptr && nbytes != static_cast<size_t>(buf.len))
        st = ort->CreateStatus(ORT_EP_FAIL, "kompute_dml EP run: an output's size differs from ORT's type");
      if (st == nullptr && nbytes > 0) {
        Py_BEGIN_ALLOW_THREADS std::memcpy(dst, buf.buf, nbytes);
        Py_END_ALLOW_THREADS
      }
      PyBuffer_Release(&buf);
      if (st != nullptr) return st;
    }
    return nullptr;
  }
};

struct Factory;

struct Ep : OrtEp {
  Factory* factory;
  PyObject* py;  // kompute_dml.ort.plugin.Ep
  std::string name;
  Ep(Factory* f, PyObject* p, std::string n);
};

struct Factory : OrtEpFactory {
  PyObject* py;  // kompute_dml.ort.plugin.Factory
  std::string name, vendor, version;

  explicit Factory(PyObject* p) : OrtEpFactory{}, py(p) {
    ort_version_supported = KDML_ORT_API;
    name = attr_string("ep_name");
    vendor = attr_string("vendor");
    version = attr_string("version");
    GetName = [](const OrtEpFactory* f) noexcept { return static_cast<const Factory*>(f)->name.c_str(); };
    GetVendor = [](const OrtEpFactory* f) noexcept { return static_cast<const Factory*>(f)->vendor.c_str(); };
    GetVendorId = [](const OrtEpFactory*) noexcept -> uint32_t { return 0; };
    GetVersion = [](const OrtEpFactory* f) noexcept { return static_cast<const Factory*>(f)->version.c_str(); };
    GetSupportedDevices = GetSupportedDevicesImpl;
    CreateEp = CreateEpImpl;
    ReleaseEp = [](OrtEpFactory*, OrtEp* ep) noexcept {
      auto* e = static_cast<Ep*>(ep);
      Gil gil;
      Py_XDECREF(e->py);
      delete e;
    };
    CreateAllocator = [](OrtEpFactory*, const OrtMemoryInfo*, const OrtKeyValuePairs*,
                         OrtAllocator** allocator) noexcept -> OrtStatus* {
      *allocator = nullptr;  // inputs and outputs live in ORT's CPU memory
      return nullptr;
    };
    ReleaseAllocator = [](OrtEpFactory*, OrtAllocator*) noexcept {};
    CreateDataTransfer = [](OrtEpFactory*, OrtDataTransferImpl** dt) noexcept -> OrtStatus* {
      *dt = nullptr;
      return nullptr;
    };
    IsStreamAware = [](const OrtEpFactory*) noexcept { return false; };
    CreateSyncStreamForDevice = [](OrtEpFactory*, const OrtMemoryDevice*, const OrtKeyValuePairs*,
                                   OrtSyncStreamImpl** stream) noexcept -> OrtStatus* {
      *stream = nullptr;
      return nullptr;
    };
  }

  std::string attr_string(const char* attr) {
    Ref v(PyObject_GetAttrString(py, attr));
    const char* s = v ? PyUnicode_AsUTF8(v.p) : nullptr;
    PyErr_Clear();
    return s != nullptr ? s : "";
  }

  static OrtStatus* GetSupportedDevicesImpl(OrtEpFactory* self_, const OrtHardwareDevice* const* devices,
                                            size_t num_devices, OrtEpDevice** ep_devices, size_t max_ep_devices,
                                            size_t* num_ep_devices) noexcept {
    auto* self = static_cast<Factory*>(self_);
    *num_ep_devices = 0;
    Gil gil;
    Ref hw(PyList_New(static_cast<Py_ssize_t>(num_devices)));
    for (size_t i = 0; i < num_devices; ++i) {
      const OrtHardwareDevice* d = devices[i];
      Ref meta(kv_dict(ort->HardwareDevice_Metadata(d)));
      PyObject* t = Py_BuildValue("(iIIsO)", static_cast<int>(ort->HardwareDevice_Type(d)),
                                  ort->HardwareDevice_VendorId(d), ort->HardwareDevice_DeviceId(d),
                                  ort->HardwareDevice_Vendor(d) ? ort->HardwareDevice_Vendor(d) : "", meta.p);
      if (t == nullptr) return status_from_python("devices");
      PyList_SET_ITEM(hw.p, static_cast<Py_ssize_t>(i), t);
    }
    Ref chosen(PyObject_CallMethod(self->py, "devices", "O", hw.p));
    if (!chosen) return status_from_python("devices");
    Py_ssize_t n = PyList_Size(chosen.p);
    for (Py_ssize_t j = 0; j < n && *num_ep_devices < max_ep_devices; ++j) {
      PyObject* item = PyList_GetItem(chosen.p, j);  // (hardware index, metadata, options)
      long index = PyLong_AsLong(PyTuple_GetItem(item, 0));
      if (PyErr_Occurred() || index < 0 || static_cast<size_t>(index) >= num_devices)
        return status_from_python("devices");
      OrtKeyValuePairs* meta = kv_pairs(PyTuple_GetItem(item, 1));
      OrtKeyValuePairs* opts = kv_pairs(PyTuple_GetItem(item, 2));
      OrtEpDevice* ep_device = nullptr;
      OrtStatus* st = ep_api->CreateEpDevice(self, devices[index], meta, opts, &ep_device);
      ort->ReleaseKeyValuePairs(meta);
      ort->ReleaseKeyValuePairs(opts);
      if (st != nullptr) return st;
      ep_devices[(*num_ep_devices)++] = ep_device;
    }
    return nullptr;
  }

  static OrtStatus* CreateEpImpl(OrtEpFactory* self_, const OrtHardwareDevice* const*,
                                 const OrtKeyValuePairs* const* metadata, size_t num_devices,
                                 const OrtSessionOptions* session_options, const OrtLogger*, OrtEp** ep) noexcept {
    auto* self = static_cast<Factory*>(self_);
    *ep = nullptr;
    OrtKeyValuePairs* config = nullptr;
    KDML_RETURN_IF_ERROR(ort->GetSessionOptionsConfigEntries(session_options, &config));
    Gil gil;
    Ref cfg(kv_dict(config));
    ort->ReleaseKeyValuePairs(config);
    Ref metas(PyList_New(static_cast<Py_ssize_t>(num_devices)));
    for (size_t i = 0; i < num_devices; ++i) PyList_SET_ITEM(metas.p, static_cast<Py_ssize_t>(i), kv_dict(metadata[i]));
    Ref py_ep(PyObject_CallMethod(self->py, "create_ep", "OO", metas.p, cfg.p));
    if (!py_ep) return status_from_python("options");
    *ep = new Ep(self, py_ep.release(), self->name);
    return nullptr;
  }
};

Ep::Ep(Factory* f, PyObject* p, std::string n) : OrtEp{}, factory(f), py(p), name(std::move(n)) {
  ort_version_supported = KDML_ORT_API;
  GetName = [](const OrtEp* e) noexcept { return static_cast<const Ep*>(e)->name.c_str(); };
  GetCapability = [](OrtEp* e_, const OrtGraph* graph, OrtEpGraphSupportInfo* info) noexcept -> OrtStatus* {
    auto* e = static_cast<Ep*>(e_);
    std::vector<const OrtNode*> nodes;
    KDML_RETURN_IF_ERROR(graph_nodes(graph, nodes));
    Gil gil;
    Ref desc(describe_graph(graph, SIZE_MAX));
    if (!desc) return status_from_python("capability");
    Ref groups(PyObject_CallMethod(e->py, "capability", "O", desc.p));
    if (!groups) return status_from_python("capability");
    OrtNodeFusionOptions options{};
    options.ort_version_supported = KDML_ORT_API;
    options.drop_constant_initializers = true;  // Compile copies the constants it needs
    for (Py_ssize_t g = 0; g < PyList_Size(groups.p); ++g) {
      PyObject* group = PyList_GetItem(groups.p, g);
      std::vector<const OrtNode*> chosen;
      for (Py_ssize_t k = 0; k < PyList_Size(group); ++k) {
        size_t i = PyLong_AsSize_t(PyList_GetItem(group, k));
        if (PyErr_Occurred() || i >= nodes.size()) return status_from_python("capability");
        chosen.push_back(nodes[i]);
      }
      if (!chosen.empty())
        KDML_RETURN_IF_ERROR(ep_api->EpGraphSupportInfo_AddNodesToFuse(info, chosen.data(), chosen.size(), &options));
    }
    return nullptr;
  };
  Compile = [](OrtEp* e_, const OrtGraph** graphs, const OrtNode** fused, size_t count,
               OrtNodeComputeInfo** infos, OrtNode** ep_context_nodes) noexcept -> OrtStatus* {
    auto* e = static_cast<Ep*>(e_);
    Gil gil;
    for (size_t i = 0; i < count; ++i) {
      infos[i] = nullptr;
      if (ep_context_nodes != nullptr) ep_context_nodes[i] = nullptr;
    }
    for (size_t i = 0; i < count; ++i) {
      const char* fused_name = nullptr;
      KDML_RETURN_IF_ERROR(ort->Node_GetName(fused[i], &fused_name));
      Ref desc(describe_graph(graphs[i], SIZE_MAX));
      if (!desc) return status_from_python("compile");
      Ref io(node_io(fused[i]));
      if (!io) return status_from_python("compile");
      Ref kernel(PyObject_CallMethod(e->py, "compile", "OsO", desc.p, fused_name ? fused_name : "", io.p));
      if (!kernel) return status_from_python("compile");
      infos[i] = new Kernel(kernel.release());
    }
    return nullptr;
  };
  ReleaseNodeComputeInfos = [](OrtEp*, OrtNodeComputeInfo** infos, size_t n) noexcept {
    Gil gil;
    for (size_t i = 0; i < n; ++i) {
      auto* k = static_cast<Kernel*>(infos[i]);
      if (k == nullptr) continue;
      Py_XDECREF(k->py);
      delete k;
    }
  };
}

}  // namespace

// The library's entry points, reached through the loader (loader.c), which makes sure an
// interpreter is running and this module is imported first.
extern "C" OrtStatus* kdml_create_ep_factories(const char* registered_name, const OrtApiBase* api_base,
                                               const OrtLogger*, OrtEpFactory** factories, size_t max_factories,
                                               size_t* num_factories) {
  *num_factories = 0;
  ort = api_base->GetApi(KDML_ORT_API);
  if (ort == nullptr) return nullptr;  // an onnxruntime older than the headers: offer nothing
  ep_api = ort->GetEpApi();
  if (max_factories < 1) return ort->CreateStatus(ORT_INVALID_ARGUMENT, "kompute_dml EP: no room for a factory");
  Gil gil;
  Ref mod(PyImport_ImportModule("kompute_dml.ort.plugin"));
  Ref py(mod ? PyObject_CallMethod(mod.p, "Factory", "s", registered_name) : nullptr);
  if (!py) return status_from_python("load");
  factories[0] = new Factory(py.release());
  *num_factories = 1;
  return nullptr;
}

extern "C" OrtStatus* kdml_release_ep_factory(OrtEpFactory* factory) {
  auto* f = static_cast<Factory*>(factory);
  Gil gil;
  Py_XDECREF(f->py);
  delete f;
  return nullptr;
}

static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_ep", "kompute_dml's plugin EP tables (see loader.c).", -1,
                                 nullptr};

PyMODINIT_FUNC PyInit__ep(void) {
  PyObject* m = PyModule_Create(&module_def);
  if (m == nullptr) return nullptr;
  PyModule_AddObject(m, "create_factories", PyLong_FromVoidPtr(reinterpret_cast<void*>(&kdml_create_ep_factories)));
  PyModule_AddObject(m, "release_factory", PyLong_FromVoidPtr(reinterpret_cast<void*>(&kdml_release_ep_factory)));
  return m;
}

}  // namespace kdml_ep
