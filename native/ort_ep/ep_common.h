// Shared by the kompute_dml plugin execution provider's translation units: the ORT API
// tables, the GIL guard and the Python <-> OrtStatus helpers. The EP's logic lives in Python
// (kompute_dml/ort/plugin.py); this side only converts ORT's C objects and calls it.
#pragma once
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <onnxruntime_c_api.h>

#include <map>
#include <string>
#include <vector>

// The ORT API version the EP asks for and declares in its tables: the plugin EP API's first
// (onnxruntime 1.23), so that any newer onnxruntime takes the library whatever headers built it.
#define KDML_ORT_API 23

namespace kdml_ep {

extern const OrtApi* ort;       // set once by CreateEpFactories
extern const OrtEpApi* ep_api;

// Holds the GIL for a scope: ORT calls the EP from its own threads.
struct Gil {
  PyGILState_STATE state;
  Gil() : state(PyGILState_Ensure()) {}
  ~Gil() { PyGILState_Release(state); }
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;
};

// A new reference holder.
struct Ref {
  PyObject* p;
  explicit Ref(PyObject* o = nullptr) : p(o) {}
  ~Ref() { Py_XDECREF(p); }
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
  PyObject* release() { PyObject* o = p; p = nullptr; return o; }
  explicit operator bool() const { return p != nullptr; }
};

// The pending Python exception as an OrtStatus (its type and message), cleared.
OrtStatus* status_from_python(const char* where);
// An ORT error status as a Python RuntimeError; returns nullptr for the caller to propagate.
PyObject* raise_ort(OrtStatus* status);

// OrtGraph -> the plain Python description that kompute_dml/ort/graph.py turns into an
// onnx.ModelProto (the format: ep_graph.cc's first comment). Initializers larger than
// max_initializer_bytes are described without their bytes.
PyObject* describe_graph(const OrtGraph* graph, size_t max_initializer_bytes);
// A tensor's element type and dims.
OrtStatus* tensor_shape(const OrtValue* value, ONNXTensorElementDataType* elem_type, std::vector<int64_t>* dims);
// dims as a Python tuple of ints (a new reference).
PyObject* shape_tuple(const std::vector<int64_t>& dims);
// An allocation of the device-memory variant (ep_memory.cc): its Buffer and the length of the
// address range that stands for it.
struct Block {
  PyObject* buffer;  // a kompute_dml Buffer (None for an empty allocation)
  size_t nbytes;
};

// The device memory of a factory offering it: memory infos per Vulkan device, allocators, the
// data transfer, and how a value's data reaches Python (a Buffer, or a view of host memory).
struct DeviceMemory {
  PyObject* factory;  // kompute_dml.ort.plugin.Factory (alloc, copy)
  std::map<int, OrtMemoryInfo*> infos;
  explicit DeviceMemory(PyObject* factory_py);
  ~DeviceMemory();
  OrtStatus* add_to(OrtEpDevice* ep_device, int vulkan_index);
  bool is_ours(const OrtMemoryDevice* device) const;
  OrtStatus* create_allocator(const OrtMemoryInfo* info, OrtAllocator** out);
  void release_allocator(OrtAllocator* allocator);
  OrtDataTransferImpl* data_transfer();
  // A new reference: (Buffer, byte offset) where the value is in this memory (None for an empty
  // allocation), else a memoryview of the host memory.
  PyObject* value_data(const OrtValue* value, void* data, size_t nbytes, bool writable) const;
};

// A compiled sub-graph's OrtNodeComputeInfo around its plugin.Kernel (ep_kernel.cc; takes the
// reference; null with a Python error pending where the Kernel has no run), and its release.
OrtNodeComputeInfo* make_kernel(PyObject* kernel, const DeviceMemory* memory);
void release_kernel(OrtNodeComputeInfo* info);

// (input names, output names) of a node ("" for an absent optional one).
PyObject* node_io(const OrtNode* node);
// OrtNode pointers of a graph in the order describe_graph lists them.
OrtStatus* graph_nodes(const OrtGraph* graph, std::vector<const OrtNode*>& out);

}  // namespace kdml_ep

#define KDML_RETURN_IF_ERROR(expr)        \
  do {                                    \
    OrtStatus* _st = (expr);              \
    if (_st != nullptr) return _st;       \
  } while (0)
