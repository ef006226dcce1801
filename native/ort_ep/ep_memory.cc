// Device memory for the EP's device-memory variant (plugin.DEVICE_MEMORY_EP_NAME): an OrtMemoryInfo
// per Vulkan device, an OrtAllocator, and the OrtDataTransferImpl that copies between host
// memory and it (plugin.Factory.copy). This is what lets ORT's IO binding keep a session's
// inputs and outputs on the GPU.
//
// ORT never reads device memory, but it does do arithmetic on device pointers: its memory
// planner allocates one block and hands out pointers inside it. So an allocation's "pointer" is
// the start of a range of reserved, inaccessible address space (mmap PROT_NONE) as long as the
// allocation, mapped to a kompute_dml Buffer: any pointer inside the range is that Buffer at that
// offset.
#include <sys/mman.h>

#include <map>
#include <mutex>

#include "ep_common.h"

namespace kdml_ep {

namespace {

struct Allocator : OrtAllocator {
  DeviceMemory* memory;
  const OrtMemoryInfo* info;
  int index;
};

// Every live allocation of every variant, by the start of its address range.
std::mutex blocks_mutex;
std::map<uintptr_t, Block> blocks;

void* alloc_block(OrtAllocator* a_, size_t nbytes) noexcept {
  auto* a = static_cast<Allocator*>(a_);
  size_t span = nbytes > 0 ? nbytes : 1;
  void* range = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (range == MAP_FAILED) return nullptr;
  Gil gil;
  Ref buffer(PyObject_CallMethod(a->memory->factory, "alloc", "in", a->index, static_cast<Py_ssize_t>(nbytes)));
  if (!buffer) {
    PyErr_Print();  // ORT reports the failed allocation; the reason goes to stderr
    munmap(range, span);
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(blocks_mutex);
  blocks[reinterpret_cast<uintptr_t>(range)] = Block{buffer.release(), span};
  return range;
}

void free_block(OrtAllocator* a_, void* p) noexcept {
  if (p == nullptr) return;
  auto* a = static_cast<Allocator*>(a_);
  Block b{nullptr, 0};
  {
    std::lock_guard<std::mutex> lock(blocks_mutex);
    auto it = blocks.find(reinterpret_cast<uintptr_t>(p));
    if (it == blocks.end()) return;
    b = it->second;
    blocks.erase(it);
  }
  munmap(p, b.nbytes);
  Gil gil;
  // what the factory kept for the block's contents (plugin.Factory.free) goes with it
  PyObject *type, *value, *trace;
  PyErr_Fetch(&type, &value, &trace);  // (an error being raised where ORT frees stays the error raised)
  {
    Ref done(PyObject_CallMethod(a->memory->factory, "free", "O", b.buffer));
    if (!done) PyErr_Print();
  }
  PyErr_Restore(type, value, trace);
  Py_XDECREF(b.buffer);
}

// (Buffer, offset) of a pointer inside an allocation, as a new reference; None if in none.
PyObject* find_block(const void* p) {
  std::lock_guard<std::mutex> lock(blocks_mutex);
  auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = blocks.upper_bound(addr);
  if (it == blocks.begin()) Py_RETURN_NONE;
  --it;
  if (addr >= it->first + it->second.nbytes) Py_RETURN_NONE;
  return Py_BuildValue("(On)", it->second.buffer, static_cast<Py_ssize_t>(addr - it->first));
}

struct Transfer : OrtDataTransferImpl {
  DeviceMemory* memory;
};

}  // namespace

DeviceMemory::DeviceMemory(PyObject* factory_py) : factory(factory_py) {}

DeviceMemory::~DeviceMemory() {
  for (auto& [index, info] : infos) ort->ReleaseMemoryInfo(info);
}

OrtStatus* DeviceMemory::add_to(OrtEpDevice* ep_device, int index) {
  auto it = infos.find(index);
  if (it == infos.end()) {
    OrtMemoryInfo* info = nullptr;
    std::string name = "KomputeDml:" + std::to_string(index);
    // vendor 0 and the Vulkan index: what onnxruntime's bind_output(name, "gpu", index) names
    KDML_RETURN_IF_ERROR(ort->CreateMemoryInfo_V2(name.c_str(), OrtMemoryInfoDeviceType_GPU, 0, index,
                                                  OrtDeviceMemoryType_DEFAULT, 0, OrtDeviceAllocator, &info));
    it = infos.emplace(index, info).first;
  }
  return ep_api->EpDevice_AddAllocatorInfo(ep_device, it->second);
}

bool DeviceMemory::is_ours(const OrtMemoryDevice* device) const {
  if (device == nullptr) return false;
  for (const auto& [index, info] : infos)
    if (ep_api->MemoryDevice_AreEqual(device, ep_api->MemoryInfo_GetMemoryDevice(info))) return true;
  return false;
}

OrtStatus* DeviceMemory::create_allocator(const OrtMemoryInfo* info, OrtAllocator** out) {
  *out = nullptr;
  for (const auto& [index, mine] : infos) {
    if (!ep_api->MemoryDevice_AreEqual(ep_api->MemoryInfo_GetMemoryDevice(info),
                                       ep_api->MemoryInfo_GetMemoryDevice(mine)))
      continue;
    auto* a = new Allocator{};
    a->version = KDML_ORT_API;
    a->Alloc = alloc_block;
    a->Reserve = alloc_block;
    a->Free = free_block;
    a->Info = [](const OrtAllocator* self) noexcept { return static_cast<const Allocator*>(self)->info; };
    a->memory = this;
    a->info = mine;
    a->index = index;
    *out = a;
    return nullptr;
  }
  return ort->CreateStatus(ORT_INVALID_ARGUMENT, "kompute_dml EP: no device memory matches that OrtMemoryInfo");
}

void DeviceMemory::release_allocator(OrtAllocator* a) { delete static_cast<Allocator*>(a); }

OrtDataTransferImpl* DeviceMemory::data_transfer() {
  auto* t = new Transfer{};
  t->ort_version_supported = KDML_ORT_API;
  t->memory = this;
  t->Release = [](OrtDataTransferImpl* self) noexcept { delete static_cast<Transfer*>(self); };
  t->CanCopy = [](const OrtDataTransferImpl* self, const OrtMemoryDevice* src, const OrtMemoryDevice* dst) noexcept {
    auto* m = static_cast<const Transfer*>(self)->memory;
    auto host = [](const OrtMemoryDevice* d) {
      return ep_api->MemoryDevice_GetDeviceType(d) == OrtMemoryInfoDeviceType_CPU ||
             ep_api->MemoryDevice_GetMemoryType(d) == OrtDeviceMemoryType_HOST_ACCESSIBLE;
    };
    return (m->is_ours(src) || m->is_ours(dst)) && (m->is_ours(src) || host(src)) && (m->is_ours(dst) || host(dst));
  };
  t->CopyTensors = [](OrtDataTransferImpl* self, const OrtValue** src, OrtValue** dst, OrtSyncStream**,
                      size_t n) noexcept -> OrtStatus* {
    auto* m = static_cast<Transfer*>(self)->memory;
    Gil gil;
    Ref pairs(PyList_New(static_cast<Py_ssize_t>(n)));
    if (!pairs) return status_from_python("copy");
    for (size_t i = 0; i < n; ++i) {
      const void* s = nullptr;
      void* d = nullptr;
      size_t nbytes = 0;
      KDML_RETURN_IF_ERROR(ort->GetTensorData(src[i], &s));
      KDML_RETURN_IF_ERROR(ort->GetTensorMutableData(dst[i], &d));
      KDML_RETURN_IF_ERROR(ort->GetTensorSizeInBytes(src[i], &nbytes));
      Ref so(m->value_data(src[i], const_cast<void*>(s), nbytes, false));
      Ref dobj(m->value_data(dst[i], d, nbytes, true));
      if (!so || !dobj) return status_from_python("copy");
      PyList_SET_ITEM(pairs.p, static_cast<Py_ssize_t>(i), Py_BuildValue("(OOn)", so.p, dobj.p,
                                                                          static_cast<Py_ssize_t>(nbytes)));
    }
    Ref done(PyObject_CallMethod(m->factory, "copy", "O", pairs.p));
    return done ? nullptr : status_from_python("copy");
  };
  return t;
}

PyObject* DeviceMemory::value_data(const OrtValue* value, void* data, size_t nbytes, bool writable) const {
  if (is_ours(ep_api->Value_GetMemoryDevice(value))) return find_block(data);
  static char empty[8];
  return PyMemoryView_FromMemory(data != nullptr ? static_cast<char*>(data) : empty, static_cast<Py_ssize_t>(nbytes),
                                 writable ? PyBUF_WRITE : PyBUF_READ);
}

}  // namespace kdml_ep
