// The OrtEpFactory / OrtEp / OrtNodeComputeInfo tables of the kompute_dml plugin EP. Each entry
// takes the GIL and calls the matching method of kompute_dml/ort/plugin.py's Factory, Ep or
// Kernel; Python exceptions come back to ORT as ORT_EP_FAIL statuses carrying their message.
#include <atomic>
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
  std::unique_ptr<DeviceMemory> memory;  // the device-memory variant's
  // ORT's reference plus one per live EP and allocator: ORT may release the factory (the library
  // unregistered) while sessions still use its EPs, kernels and memory; the last user deletes it.
  std::atomic<int> refs{1};

  static void unref(Factory* f) {  // with the GIL held
    if (--f->refs > 0) return;
    Py_XDECREF(f->py);
    delete f;
  }

  explicit Factory(PyObject* p) : OrtEpFactory{}, py(p) {
    Ref flag(PyObject_GetAttrString(py, "device_memory"));
    if (flag && PyObject_IsTrue(flag.p) == 1) memory = std::make_unique<DeviceMemory>(py);
    PyErr_Clear();
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
    ReleaseEp = [](OrtEpFactory* f, OrtEp* ep) noexcept {
      auto* e = static_cast<Ep*>(ep);
      Gil gil;
      Py_XDECREF(e->py);
      delete e;
      unref(static_cast<Factory*>(f));
    };
    CreateAllocator = [](OrtEpFactory* f_, const OrtMemoryInfo* info, const OrtKeyValuePairs*,
                         OrtAllocator** allocator) noexcept -> OrtStatus* {
      auto* f = static_cast<Factory*>(f_);
      *allocator = nullptr;  // null: ORT's CPU memory (the host-memory variant's inputs and outputs)
      if (!f->memory || info == nullptr) return nullptr;
      KDML_RETURN_IF_ERROR(f->memory->create_allocator(info, allocator));
      ++f->refs;
      return nullptr;
    };
    ReleaseAllocator = [](OrtEpFactory* f_, OrtAllocator* allocator) noexcept {
      auto* f = static_cast<Factory*>(f_);
      if (!f->memory || allocator == nullptr) return;
      f->memory->release_allocator(allocator);
      Gil gil;
      unref(f);
    };
    CreateDataTransfer = [](OrtEpFactory* f_, OrtDataTransferImpl** dt) noexcept -> OrtStatus* {
      auto* f = static_cast<Factory*>(f_);
      *dt = f->memory ? f->memory->data_transfer() : nullptr;
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
      PyObject* item = PyList_GetItem(chosen.p, j);  // (hardware index, metadata, options, Vulkan index)
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
      if (self->memory) {
        long vk = PyLong_AsLong(PyTuple_GetItem(item, 3));
        if (PyErr_Occurred()) return status_from_python("devices");
        KDML_RETURN_IF_ERROR(self->memory->add_to(ep_device, static_cast<int>(vk)));
      }
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
    ++self->refs;
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
      infos[i] = make_kernel(kernel.release(), e->factory->memory.get());
      if (infos[i] == nullptr) return status_from_python("compile");
    }
    return nullptr;
  };
  ReleaseNodeComputeInfos = [](OrtEp*, OrtNodeComputeInfo** infos, size_t n) noexcept {
    Gil gil;
    for (size_t i = 0; i < n; ++i) release_kernel(infos[i]);
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
  Ref list(mod ? PyObject_CallMethod(mod.p, "factories", "s", registered_name) : nullptr);
  if (!list || !PyList_Check(list.p)) return status_from_python("load");
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list.p) && *num_factories < max_factories; ++i)
    factories[(*num_factories)++] = new Factory(Py_NewRef(PyList_GET_ITEM(list.p, i)));
  return nullptr;
}

extern "C" OrtStatus* kdml_release_ep_factory(OrtEpFactory* factory) {
  Gil gil;
  Factory::unref(static_cast<Factory*>(factory));
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
