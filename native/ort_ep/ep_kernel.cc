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

// What an `alloc` function's capsule points at: the sink of the call in progress, null between
// calls (an `alloc` kept past its call then raises instead of reaching a finished call's sink).
using SinkSlot = OutputSink*;

// A value's data for Python: a Buffer where it is in the EP's device memory, else a view.
PyObject* data_object(const DeviceMemory* memory, const OrtValue* v, void* data, size_t nbytes, bool writable) {
  if (memory != nullptr) return memory->value_data(v, data, nbytes, writable);
  static char empty[8];
  return PyMemoryView_FromMemory(data != nullptr ? static_cast<char*>(data) : empty, static_cast<Py_ssize_t>(nbytes),
                                 writable ? PyBUF_WRITE : PyBUF_READ);
}

PyObject* alloc_output(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  auto* slot = static_cast<SinkSlot*>(PyCapsule_GetPointer(self, "kdml.sink"));
  if (slot == nullptr) return nullptr;
  OutputSink* sink = *slot;
  if (sink == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "alloc called after its run");
    return nullptr;
  }
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "alloc(index, shape)");
    return nullptr;
  }
  Py_ssize_t index = PyLong_AsSsize_t(args[0]);
  if (index == -1 && PyErr_Occurred()) return nullptr;
  if (index < 0 || static_cast<size_t>(index) >= sink->data.size()) {
    PyErr_SetString(PyExc_IndexError, "output index");
    return nullptr;
  }
  Ref seq(PySequence_Fast(args[1], "shape must be a sequence"));
  if (!seq) return nullptr;
  int64_t dims[16];  // ranks past 16 (ONNX allows any) take the vector
  std::vector<int64_t> more;
  Py_ssize_t rank = PySequence_Fast_GET_SIZE(seq.p);
  if (rank > 16) more.resize(static_cast<size_t>(rank));
  int64_t* d = rank > 16 ? more.data() : dims;
  for (Py_ssize_t i = 0; i < rank; ++i) {
    d[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq.p, i));
    if (d[i] == -1 && PyErr_Occurred()) return nullptr;
  }
  OrtValue* out = nullptr;
  void* dst = nullptr;
  size_t nbytes = 0;
  if (OrtStatus* st = ort->KernelContext_GetOutput(sink->ctx, static_cast<size_t>(index), d, static_cast<size_t>(rank), &out))
    return raise_ort(st);
  if (OrtStatus* st = ort->GetTensorMutableData(out, &dst)) return raise_ort(st);
  if (OrtStatus* st = ort->GetTensorSizeInBytes(out, &nbytes)) return raise_ort(st);
  sink->data[static_cast<size_t>(index)] = dst;
  return data_object(sink->memory, out, dst, nbytes, true);
}

PyMethodDef alloc_def = {"alloc", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(alloc_output)),
                         METH_FASTCALL, "ORT's output buffer `index` of `shape`"};

// An `alloc` function over a slot of its own on the heap, freed with its capsule.
PyObject* new_alloc(SinkSlot** slot_out) {
  auto* slot = new SinkSlot(nullptr);
  Ref capsule(PyCapsule_New(slot, "kdml.sink", [](PyObject* c) {
    delete static_cast<SinkSlot*>(PyCapsule_GetPointer(c, "kdml.sink"));
  }));
  if (!capsule) {
    delete slot;
    return nullptr;
  }
  *slot_out = slot;
  return PyCFunction_New(&alloc_def, capsule.p);
}

// ORT's input i as (data, element type, shape) for Kernel.run.
PyObject* input_item(const DeviceMemory* memory, OrtKernelContext* ctx, size_t i, std::vector<int64_t>* dims,
                     OrtStatus** st) {
  const OrtValue* v = nullptr;
  ONNXTensorElementDataType et;
  const void* data = nullptr;
  size_t nbytes = 0;
  *st = ort->KernelContext_GetInput(ctx, i, &v);
  if (*st == nullptr) *st = tensor_shape(v, &et, dims);
  if (*st == nullptr) *st = ort->GetTensorData(v, &data);
  if (*st == nullptr) *st = ort->GetTensorSizeInBytes(v, &nbytes);
  if (*st != nullptr) return nullptr;
  Ref item(PyTuple_New(3));
  if (!item) return nullptr;
  PyObject* mv = data_object(memory, v, const_cast<void*>(data), nbytes, false);
  if (mv == nullptr) return nullptr;
  PyTuple_SET_ITEM(item.p, 0, mv);
  PyObject* elem = PyLong_FromLong(static_cast<long>(et));
  if (elem == nullptr) return nullptr;
  PyTuple_SET_ITEM(item.p, 1, elem);
  PyObject* shape = shape_tuple(*dims);
  if (shape == nullptr) return nullptr;
  PyTuple_SET_ITEM(item.p, 2, shape);
  return item.release();
}

struct Kernel : OrtNodeComputeInfo {
  PyObject* py;   // kompute_dml.ort.plugin.Kernel
  PyObject* run;  // its bound run, looked up once
  // an `alloc` kept for the next call (a call finding it in use, as when ORT runs the session
  // from two threads, makes its own): its Python objects cost ~0.3 us per call otherwise
  PyObject* alloc = nullptr;
  SinkSlot* alloc_slot = nullptr;
  const DeviceMemory* memory;
  Kernel(PyObject* k, PyObject* r, const DeviceMemory* m) : OrtNodeComputeInfo{}, py(k), run(r), memory(m) {
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
    Ref inputs(PyTuple_New(static_cast<Py_ssize_t>(nin)));
    if (!inputs) return status_from_python("compute");
    std::vector<int64_t> dims;
    for (size_t i = 0; i < nin; ++i) {
      OrtStatus* st = nullptr;
      PyObject* item = input_item(self->memory, ctx, i, &dims, &st);
      if (st != nullptr) return st;
      if (item == nullptr) return status_from_python("compute");
      PyTuple_SET_ITEM(inputs.p, static_cast<Py_ssize_t>(i), item);
    }
    OutputSink sink{ctx, self->memory, std::vector<void*>(nout, nullptr)};
    Ref alloc;
    SinkSlot* slot = nullptr;
    if (self->alloc != nullptr && *self->alloc_slot == nullptr) {  // the kept one, free (the GIL held)
      alloc.p = Py_NewRef(self->alloc);
      slot = self->alloc_slot;
    } else {
      alloc.p = new_alloc(&slot);
      if (!alloc) return status_from_python("compute");
      if (self->alloc == nullptr) {
        self->alloc = Py_NewRef(alloc.p);
        self->alloc_slot = slot;
      }
    }
    *slot = &sink;
    PyObject* args[] = {inputs.p, alloc.p};
    Ref outs(PyObject_Vectorcall(self->run, args, 2, nullptr));
    *slot = nullptr;
    if (!outs) return status_from_python("run");
    if (!PyList_Check(outs.p) || static_cast<size_t>(PyList_GET_SIZE(outs.p)) != nout)
      return ort->CreateStatus(ORT_EP_FAIL, "kompute_dml EP run: wrong number of outputs");
    for (size_t i = 0; i < nout; ++i) {
      if (PyList_GET_ITEM(outs.p, i) == Py_None) continue;  // written through alloc
      Py_buffer buf;
      if (PyObject_GetBuffer(PyList_GET_ITEM(outs.p, i), &buf, PyBUF_C_CONTIGUOUS | PyBUF_ND) != 0)
        return status_from_python("output");
      if (sink.data[i] != nullptr && sink.data[i] == buf.buf) {  // written in place through alloc
        PyBuffer_Release(&buf);
        continue;
      }
      std::vector<int64_t> out_dims(buf.shape, buf.shape + buf.ndim);
      OrtValue* out = nullptr;
      OrtStatus* st = ort->KernelContext_GetOutput(ctx, i, out_dims.data(), out_dims.size(), &out);
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

OrtNodeComputeInfo* make_kernel(PyObject* kernel, const DeviceMemory* memory) {  // with the GIL held
  PyObject* run = PyObject_GetAttrString(kernel, "run");
  if (run == nullptr) {
    Py_DECREF(kernel);
    return nullptr;  // the Python error pending
  }
  return new Kernel(kernel, run, memory);
}

void release_kernel(OrtNodeComputeInfo* info) {  // with the GIL held
  auto* k = static_cast<Kernel*>(info);
  if (k == nullptr) return;
  Py_XDECREF(k->alloc);
  Py_XDECREF(k->run);
  Py_XDECREF(k->py);
  delete k;
}

}  // namespace kdml_ep
