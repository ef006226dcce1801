// OrtGraph -> a plain Python description, so that the EP's decisions are the backend's own.
//
//   {"name": str, "opsets": [(domain, version)], "inputs": [vi], "outputs": [vi],
//    "initializers": [(name, elem_type, dims, memoryview | None)], "value_info": [vi],
//    "nodes": [(op_type, domain, name, [input names], [output names], {attr: value}, [output vi])]}
//   vi = (name, elem_type, dims | None); elem_type is ONNX's (-1: not a tensor); a dim is an
//   int, or a str for a symbolic or unknown one.
//   attr values: int, float, bytes, ("ints" | "floats" | "strings", [values]),
//   ("tensor", elem_type, dims, bytes),
//   or None for what the EP never claims (graph attributes).
// The memoryviews point at ORT's memory: valid only during the call that received them.
#include <algorithm>
#include <string>
#include <vector>

#include "ep_common.h"

namespace kdml_ep {

OrtStatus* tensor_shape(const OrtValue* value, ONNXTensorElementDataType* elem_type, std::vector<int64_t>* dims) {
  OrtTensorTypeAndShapeInfo* info = nullptr;
  KDML_RETURN_IF_ERROR(ort->GetTensorTypeAndShape(value, &info));
  size_t rank = 0;
  OrtStatus* st = ort->GetTensorElementType(info, elem_type);
  if (st == nullptr) st = ort->GetDimensionsCount(info, &rank);
  dims->assign(rank, 0);
  if (st == nullptr) st = ort->GetDimensions(info, dims->data(), rank);
  ort->ReleaseTensorTypeAndShapeInfo(info);
  return st;
}

PyObject* shape_tuple(const std::vector<int64_t>& dims) {
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(dims.size()));
  for (size_t i = 0; t != nullptr && i < dims.size(); ++i)
    PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), PyLong_FromLongLong(dims[i]));
  return t;
}

namespace {

#define PY_CHECK(obj) \
  if (!(obj)) return nullptr

// (elem_type, dims) of a type info; elem_type -1 when it is not a tensor.
PyObject* tensor_type(const OrtTypeInfo* type_info, int* elem_type_out) {
  *elem_type_out = -1;
  if (type_info == nullptr) Py_RETURN_NONE;
  ONNXType kind;
  if (ort->GetOnnxTypeFromTypeInfo(type_info, &kind) != nullptr || kind != ONNX_TYPE_TENSOR) Py_RETURN_NONE;
  const OrtTensorTypeAndShapeInfo* info = nullptr;
  if (OrtStatus* st = ort->CastTypeInfoToTensorInfo(type_info, &info)) return raise_ort(st);
  ONNXTensorElementDataType et;
  if (OrtStatus* st = ort->GetTensorElementType(info, &et)) return raise_ort(st);
  *elem_type_out = static_cast<int>(et);
  size_t rank = 0;
  if (OrtStatus* st = ort->GetDimensionsCount(info, &rank)) return raise_ort(st);
  std::vector<int64_t> dims(rank);
  std::vector<const char*> syms(rank, nullptr);
  if (OrtStatus* st = ort->GetDimensions(info, dims.data(), rank)) return raise_ort(st);
  if (OrtStatus* st = ort->GetSymbolicDimensions(info, syms.data(), rank)) return raise_ort(st);
  Ref list(PyList_New(static_cast<Py_ssize_t>(rank)));
  PY_CHECK(list.p);
  for (size_t i = 0; i < rank; ++i) {
    PyObject* d = dims[i] >= 0 ? PyLong_FromLongLong(dims[i])
                               : PyUnicode_FromString(syms[i] != nullptr ? syms[i] : "");
    PY_CHECK(d);
    PyList_SET_ITEM(list.p, static_cast<Py_ssize_t>(i), d);
  }
  return list.release();
}

PyObject* value_info(const OrtValueInfo* vi) {
  const char* name = nullptr;
  if (OrtStatus* st = ort->GetValueInfoName(vi, &name)) return raise_ort(st);
  const OrtTypeInfo* ti = nullptr;
  if (OrtStatus* st = ort->GetValueInfoTypeInfo(vi, &ti)) return raise_ort(st);
  int et = -1;
  Ref dims(tensor_type(ti, &et));
  PY_CHECK(dims.p);
  return Py_BuildValue("(siO)", name, et, dims.p);
}

template <typename GetCount, typename GetItems>
PyObject* value_infos(GetCount count_fn, GetItems items_fn, bool names_only) {
  size_t n = 0;
  if (OrtStatus* st = count_fn(&n)) return raise_ort(st);
  std::vector<const OrtValueInfo*> vis(n, nullptr);
  if (n > 0) {
    if (OrtStatus* st = items_fn(vis.data(), n)) return raise_ort(st);
  }
  Ref list(PyList_New(static_cast<Py_ssize_t>(n)));
  PY_CHECK(list.p);
  for (size_t i = 0; i < n; ++i) {
    PyObject* item = nullptr;
    if (vis[i] == nullptr) {
      item = names_only ? PyUnicode_FromString("") : Py_BuildValue("(siO)", "", -1, Py_None);
    } else if (names_only) {
      const char* name = nullptr;
      if (OrtStatus* st = ort->GetValueInfoName(vis[i], &name)) return raise_ort(st);
      item = PyUnicode_FromString(name);
    } else {
      item = value_info(vis[i]);
    }
    PY_CHECK(item);
    PyList_SET_ITEM(list.p, static_cast<Py_ssize_t>(i), item);
  }
  return list.release();
}

// A tensor OrtValue as ("tensor", elem_type, dims, memoryview) (no copy).
PyObject* tensor_view(const OrtValue* value, bool with_data) {
  ONNXTensorElementDataType et;
  std::vector<int64_t> dims;
  if (OrtStatus* st = tensor_shape(value, &et, &dims)) return raise_ort(st);
  Ref pydims(shape_tuple(dims));
  PY_CHECK(pydims.p);
  Ref data(nullptr);
  if (with_data && et != ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING) {
    const void* ptr = nullptr;
    size_t nbytes = 0;
    if (OrtStatus* s2 = ort->GetTensorData(value, &ptr)) return raise_ort(s2);
    if (OrtStatus* s2 = ort->GetTensorSizeInBytes(value, &nbytes)) return raise_ort(s2);
    data.p = PyMemoryView_FromMemory(const_cast<char*>(static_cast<const char*>(ptr)),
                                     static_cast<Py_ssize_t>(nbytes), PyBUF_READ);
    PY_CHECK(data.p);
  } else {
    data.p = Py_NewRef(Py_None);
  }
  return Py_BuildValue("(siOO)", "tensor", static_cast<int>(et), pydims.p, data.p);
}

PyObject* attribute(const OrtOpAttr* attr) {
  OrtOpAttrType type;
  if (OrtStatus* st = ort->OpAttr_GetType(attr, &type)) return raise_ort(st);
  size_t need = 0;
  switch (type) {
    case ORT_OP_ATTR_INT: {
      int64_t v = 0;
      if (OrtStatus* st = ort->ReadOpAttr(attr, type, &v, sizeof v, &need)) return raise_ort(st);
      return PyLong_FromLongLong(v);
    }
    case ORT_OP_ATTR_FLOAT: {
      float v = 0;
      if (OrtStatus* st = ort->ReadOpAttr(attr, type, &v, sizeof v, &need)) return raise_ort(st);
      return PyFloat_FromDouble(v);
    }
    case ORT_OP_ATTR_INTS:
    case ORT_OP_ATTR_FLOATS:
    case ORT_OP_ATTR_STRING:
    case ORT_OP_ATTR_STRINGS: {
      // First call sizes the buffer (an error status carrying the size is expected).
      if (OrtStatus* st = ort->ReadOpAttr(attr, type, nullptr, 0, &need)) ort->ReleaseStatus(st);
      std::vector<char> buf(need + 1, 0);
      if (need > 0) {
        if (OrtStatus* st = ort->ReadOpAttr(attr, type, buf.data(), need, &need)) return raise_ort(st);
      }
      if (type == ORT_OP_ATTR_STRING) return PyBytes_FromStringAndSize(buf.data(), static_cast<Py_ssize_t>(need));
      const char* kind = type == ORT_OP_ATTR_INTS ? "ints" : type == ORT_OP_ATTR_FLOATS ? "floats" : "strings";
      if (type == ORT_OP_ATTR_STRINGS) {  // NUL-separated
        Ref list(PyList_New(0));
        size_t start = 0;
        for (size_t i = 0; i < need; ++i) {
          if (buf[i] == '\0') {
            Ref s(PyBytes_FromStringAndSize(buf.data() + start, static_cast<Py_ssize_t>(i - start)));
            PY_CHECK(s.p);
            if (PyList_Append(list.p, s.p) != 0) return nullptr;
            start = i + 1;
          }
        }
        return Py_BuildValue("(sO)", kind, list.p);
      }
      bool ints = type == ORT_OP_ATTR_INTS;
      size_t item = ints ? sizeof(int64_t) : sizeof(float);
      size_t n = need / item;
      Ref list(PyList_New(static_cast<Py_ssize_t>(n)));
      PY_CHECK(list.p);
      for (size_t i = 0; i < n; ++i) {
        PyObject* v = ints ? PyLong_FromLongLong(reinterpret_cast<const int64_t*>(buf.data())[i])
                           : PyFloat_FromDouble(reinterpret_cast<const float*>(buf.data())[i]);
        PyList_SET_ITEM(list.p, static_cast<Py_ssize_t>(i), v);
      }
      return Py_BuildValue("(sO)", kind, list.p);
    }
    case ORT_OP_ATTR_TENSOR: {
      OrtValue* value = nullptr;
      if (OrtStatus* st = ort->OpAttr_GetTensorAttributeAsOrtValue(attr, &value)) return raise_ort(st);
      if (value == nullptr) Py_RETURN_NONE;
      // The OrtValue is ours to release, so its bytes are copied.
      Ref view(tensor_view(value, true));
      PyObject* out = nullptr;
      if (view.p != nullptr) {
        PyObject* data = PyTuple_GET_ITEM(view.p, 3);
        Ref copy(data == Py_None ? Py_NewRef(Py_None) : PyBytes_FromObject(data));
        if (copy.p != nullptr)
          out = Py_BuildValue("(sOOO)", "tensor", PyTuple_GET_ITEM(view.p, 1), PyTuple_GET_ITEM(view.p, 2), copy.p);
      }
      ort->ReleaseValue(value);
      return out;
    }
    default:
      Py_RETURN_NONE;  // graph attributes: the node is not claimed
  }
}

PyObject* node_attributes(const OrtNode* node) {
  size_t n = 0;
  if (OrtStatus* st = ort->Node_GetNumAttributes(node, &n)) return raise_ort(st);
  std::vector<const OrtOpAttr*> attrs(n);
  if (n > 0) {
    if (OrtStatus* st = ort->Node_GetAttributes(node, attrs.data(), n)) return raise_ort(st);
  }
  Ref dict(PyDict_New());
  PY_CHECK(dict.p);
  for (const OrtOpAttr* a : attrs) {
    const char* name = nullptr;
    if (OrtStatus* st = ort->OpAttr_GetName(a, &name)) return raise_ort(st);
    Ref v(attribute(a));
    PY_CHECK(v.p);
    if (PyDict_SetItemString(dict.p, name, v.p) != 0) return nullptr;
  }
  size_t subgraphs = 0;
  if (OrtStatus* st = ort->Node_GetNumSubgraphs(node, &subgraphs)) return raise_ort(st);
  if (subgraphs > 0) {  // never claimed; the outer values its graphs read order it (plugin.py)
    if (PyDict_SetItemString(dict.p, "__subgraphs__", Py_None) != 0) return nullptr;
    Ref implicit(value_infos([&](size_t* n) { return ort->Node_GetNumImplicitInputs(node, n); },
                             [&](const OrtValueInfo** v, size_t n) { return ort->Node_GetImplicitInputs(node, v, n); },
                             true));
    PY_CHECK(implicit.p);
    Ref tagged(Py_BuildValue("(sO)", "strings", implicit.p));
    if (!tagged || PyDict_SetItemString(dict.p, "__implicit__", tagged.p) != 0) return nullptr;
  }
  return dict.release();
}

PyObject* node_inputs(const OrtNode* node) {
  return value_infos([&](size_t* n) { return ort->Node_GetNumInputs(node, n); },
                     [&](const OrtValueInfo** v, size_t n) { return ort->Node_GetInputs(node, v, n); }, true);
}

PyObject* node_outputs(const OrtNode* node, bool names_only) {
  return value_infos([&](size_t* n) { return ort->Node_GetNumOutputs(node, n); },
                     [&](const OrtValueInfo** v, size_t n) { return ort->Node_GetOutputs(node, v, n); }, names_only);
}

PyObject* node_desc(const OrtNode* node) {
  const char *op = nullptr, *domain = nullptr, *name = nullptr;
  if (OrtStatus* st = ort->Node_GetOperatorType(node, &op)) return raise_ort(st);
  if (OrtStatus* st = ort->Node_GetDomain(node, &domain)) return raise_ort(st);
  if (OrtStatus* st = ort->Node_GetName(node, &name)) return raise_ort(st);
  Ref ins(node_inputs(node));
  PY_CHECK(ins.p);
  Ref outs(node_outputs(node, true));
  PY_CHECK(outs.p);
  Ref out_types(node_outputs(node, false));
  PY_CHECK(out_types.p);
  Ref attrs(node_attributes(node));
  PY_CHECK(attrs.p);
  return Py_BuildValue("(sssOOOO)", op, domain ? domain : "", name ? name : "", ins.p, outs.p, attrs.p, out_types.p);
}

// A control-flow node's graph (an If branch, a Loop body) reads values of the graphs around it, which
// are none of its inputs: an outer initializer joins the initializers (onnxruntime feeds the compiled
// node no such value), any other outer value the inputs (the compiled node's inputs hold it), so that
// the described graph is whole (the backend refuses a value that nothing provides).
OrtStatus* add_outer_values(const std::vector<const OrtNode*>& nodes, PyObject* inputs, PyObject* initializers,
                            size_t max_initializer_bytes) {
  std::vector<std::string> seen;
  for (Py_ssize_t i = 0; i < PyList_Size(inputs); ++i)
    seen.emplace_back(PyUnicode_AsUTF8(PyTuple_GET_ITEM(PyList_GET_ITEM(inputs, i), 0)));
  for (Py_ssize_t i = 0; i < PyList_Size(initializers); ++i)
    seen.emplace_back(PyUnicode_AsUTF8(PyTuple_GET_ITEM(PyList_GET_ITEM(initializers, i), 0)));
  for (const OrtNode* node : nodes) {
    size_t n = 0;
    KDML_RETURN_IF_ERROR(ort->Node_GetNumInputs(node, &n));
    std::vector<const OrtValueInfo*> vis(n, nullptr);
    if (n > 0) KDML_RETURN_IF_ERROR(ort->Node_GetInputs(node, vis.data(), n));
    for (const OrtValueInfo* vi : vis) {
      bool outer = false;
      if (vi == nullptr) continue;
      KDML_RETURN_IF_ERROR(ort->ValueInfo_IsFromOuterScope(vi, &outer));
      if (!outer) continue;
      const char* name = nullptr;
      KDML_RETURN_IF_ERROR(ort->GetValueInfoName(vi, &name));
      if (std::find(seen.begin(), seen.end(), name) != seen.end()) continue;
      seen.emplace_back(name);
      const OrtValue* value = nullptr;
      KDML_RETURN_IF_ERROR(ort->ValueInfo_GetInitializerValue(vi, &value));
      if (value != nullptr) {
        size_t nbytes = 0;
        if (OrtStatus* st = ort->GetTensorSizeInBytes(value, &nbytes)) ort->ReleaseStatus(st);
        Ref view(tensor_view(value, nbytes <= max_initializer_bytes));
        if (!view) return nullptr;  // (the Python error stays set)
        Ref t(Py_BuildValue("(sOOO)", name, PyTuple_GET_ITEM(view.p, 1), PyTuple_GET_ITEM(view.p, 2),
                            PyTuple_GET_ITEM(view.p, 3)));
        if (!t || PyList_Append(initializers, t.p) != 0) return nullptr;
        continue;
      }
      Ref item(value_info(vi));
      if (!item || PyList_Append(inputs, item.p) != 0) return nullptr;
    }
  }
  return nullptr;
}

}  // namespace

PyObject* node_io(const OrtNode* node) {
  Ref ins(node_inputs(node));
  PY_CHECK(ins.p);
  Ref outs(node_outputs(node, true));
  PY_CHECK(outs.p);
  return Py_BuildValue("(OO)", ins.p, outs.p);
}

OrtStatus* graph_nodes(const OrtGraph* graph, std::vector<const OrtNode*>& out) {
  size_t n = 0;
  KDML_RETURN_IF_ERROR(ort->Graph_GetNumNodes(graph, &n));
  out.assign(n, nullptr);
  if (n > 0) KDML_RETURN_IF_ERROR(ort->Graph_GetNodes(graph, out.data(), n));
  return nullptr;
}

PyObject* describe_graph(const OrtGraph* graph, size_t max_initializer_bytes) {
  const char* gname = nullptr;
  if (OrtStatus* st = ort->Graph_GetName(graph, &gname)) return raise_ort(st);
  size_t nsets = 0;
  if (OrtStatus* st = ort->Graph_GetNumOperatorSets(graph, &nsets)) return raise_ort(st);
  std::vector<const char*> domains(nsets);
  std::vector<int64_t> versions(nsets);
  if (nsets > 0) {
    if (OrtStatus* st = ort->Graph_GetOperatorSets(graph, domains.data(), versions.data(), nsets)) return raise_ort(st);
  }
  Ref opsets(PyList_New(0));
  PY_CHECK(opsets.p);
  for (size_t i = 0; i < nsets; ++i) {
    Ref t(Py_BuildValue("(sL)", domains[i], static_cast<long long>(versions[i])));
    if (!t || PyList_Append(opsets.p, t.p) != 0) return nullptr;
  }
  Ref inputs(value_infos([&](size_t* n) { return ort->Graph_GetNumInputs(graph, n); },
                         [&](const OrtValueInfo** v, size_t n) { return ort->Graph_GetInputs(graph, v, n); }, false));
  PY_CHECK(inputs.p);
  Ref outputs(value_infos([&](size_t* n) { return ort->Graph_GetNumOutputs(graph, n); },
                          [&](const OrtValueInfo** v, size_t n) { return ort->Graph_GetOutputs(graph, v, n); }, false));
  PY_CHECK(outputs.p);
  size_t ninit = 0;
  if (OrtStatus* st = ort->Graph_GetNumInitializers(graph, &ninit)) return raise_ort(st);
  std::vector<const OrtValueInfo*> inits(ninit);
  if (ninit > 0) {
    if (OrtStatus* st = ort->Graph_GetInitializers(graph, inits.data(), ninit)) return raise_ort(st);
  }
  Ref initializers(PyList_New(0));
  PY_CHECK(initializers.p);
  for (const OrtValueInfo* vi : inits) {
    const char* name = nullptr;
    if (OrtStatus* st = ort->GetValueInfoName(vi, &name)) return raise_ort(st);
    const OrtValue* value = nullptr;
    if (OrtStatus* st = ort->ValueInfo_GetInitializerValue(vi, &value)) return raise_ort(st);
    if (value == nullptr) continue;
    size_t nbytes = 0;
    if (OrtStatus* st = ort->GetTensorSizeInBytes(value, &nbytes)) ort->ReleaseStatus(st);
    Ref view(tensor_view(value, nbytes <= max_initializer_bytes));
    PY_CHECK(view.p);
    Ref t(Py_BuildValue("(sOOO)", name, PyTuple_GET_ITEM(view.p, 1), PyTuple_GET_ITEM(view.p, 2),
                        PyTuple_GET_ITEM(view.p, 3)));
    if (!t || PyList_Append(initializers.p, t.p) != 0) return nullptr;
  }
  std::vector<const OrtNode*> nodes;
  if (OrtStatus* st = graph_nodes(graph, nodes)) return raise_ort(st);
  if (OrtStatus* st = add_outer_values(nodes, inputs.p, initializers.p, max_initializer_bytes)) return raise_ort(st);
  if (PyErr_Occurred()) return nullptr;
  Ref node_list(PyList_New(static_cast<Py_ssize_t>(nodes.size())));
  PY_CHECK(node_list.p);
  for (size_t i = 0; i < nodes.size(); ++i) {
    PyObject* d = node_desc(nodes[i]);
    PY_CHECK(d);
    PyList_SET_ITEM(node_list.p, static_cast<Py_ssize_t>(i), d);
  }
  return Py_BuildValue("{s:s,s:O,s:O,s:O,s:O,s:O}", "name", gname ? gname : "", "opsets", opsets.p, "inputs",
                       inputs.p, "outputs", outputs.p, "initializers", initializers.p, "nodes", node_list.p);
}

}  // namespace kdml_ep
