// The compute function of a compiled sub-graph: ORT's inputs to kompute_dml/ort/plugin.py's
// Kernel.run, its results into ORT's outputs.
#include <cstring>

#include "ep_common.h"

namespace kdml_ep {
namespace {

// The output buffers of one Compute call, handed to Python as `alloc(index, shape)`, which
// allocates ORT's output and returns a writable view of it, so the backend reads its results
// straight into ORT's memory (BackendRep.run's `out`).
struct OutputSink {
  OrtKernelContext* ctx;
  const DeviceMemory* memory;  // null: host memory only
  std::vector<void*> data;
};

// A value's data for Python: a Buffer where it is in the EP's device memory, else a view.
PyObject* data_object(const DeviceMemory* memory, const OrtValue* v, void* data, size_t nbytes, bool writable) {
  if (memory != nullptr) return memory->value_data(v, data, nbytes, writable);
  static char empty[8];
  return PyMemoryView_FromMemory(data != nullptr ? static_cast<char*>(data) : empty, static_cast<Py_ssize_t>(nbytes),
                                 writable ? PyBUF_WRITE : PyBUF_READ);
}

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
  sink->data[static_cast<size_t>(index)] = dst;
  return data_object(sink->memory, out, dst, nbytes, true);
}

PyMethodDef alloc_def = {"alloc", alloc_output, METH_VARARGS, "ORT's output buffer `index` of `shape`"};

struct Kernel : OrtNodeComputeInfo {
  PyObject* py;  // kompute_dml.ort.plugin.Kernel
  const DeviceMemory* memory;
  Kernel(PyObject* k, const DeviceMemory* m) : OrtNodeComputeInfo{}, py(k), memory(m) {
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
      Ref mv(data_object(self->memory, v, const_cast<void*>(data), nbytes, false));
      PyObject* item = mv ? Py_BuildValue("(OiO)", mv.p, static_cast<int>(et), shape.p) : nullptr;
      if (item == nullptr) return status_from_python("compute");
      PyList_SET_ITEM(inputs.p, static_cast<Py_ssize_t>(i), item);
    }
    OutputSink sink{ctx, self->memory, std::vector<void*>(nout, nullptr)};
    Ref capsule(PyCapsule_New(&sink, "kdml.sink", nullptr));
    Ref alloc(capsule ? PyCFunction_New(&alloc_def, capsule.p) : nullptr);
    if (!alloc) return status_from_python("compute");
    Ref outs(PyObject_CallMethod(self->py, "run", "OO", inputs.p, alloc.p));
    if (!outs) return status_from_python("run");
    if (!PyList_Check(outs.p) || static_cast<size_t>(PyList_GET_SIZE(outs.p)) != nout)
      return ort->CreateStatus(ORT_EP_FAIL, "kompute_dml EP run: wrong number of outputs");
    for (size_t i = 0; i < nout; ++i) {
      if (PyList_GET_ITEM(outs.p, i) == Py_None) continue;  // written through alloc (device memory)
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

}  // namespace

OrtNodeComputeInfo* make_kernel(PyObject* kernel, const DeviceMemory* memory) { return new Kernel(kernel, memory); }

void release_kernel(OrtNodeComputeInfo* info) {  // with the GIL held
  auto* k = static_cast<Kernel*>(info);
  if (k == nullptr) return;
  Py_XDECREF(k->py);
  delete k;
}

}  // namespace kdml_ep
