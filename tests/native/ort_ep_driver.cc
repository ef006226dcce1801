// A C++ host for the kompute_dml plugin EP (tests/test_ort_ep.py builds and runs it): no Python
// in the process until the EP library starts its own interpreter.
//   ort_ep_driver LIBRARY MODEL INPUT_NAME IN.raw D0 D1 ... -- OUT.raw
// runs MODEL's first output for one float32 input of the given shape, read from IN.raw, and
// writes the output's float32 bytes to OUT.raw; prints the EP devices and the output shape.
#include <onnxruntime_c_api.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

static const OrtApi* api;

static void check(OrtStatus* st, const char* what) {
  if (st == nullptr) return;
  std::fprintf(stderr, "%s: %s\n", what, api->GetErrorMessage(st));
  std::exit(2);
}

int main(int argc, char** argv) {
  if (argc < 7) return 64;
  api = OrtGetApiBase()->GetApi(23);
  const char *lib = argv[1], *model = argv[2], *input_name = argv[3], *in_path = argv[4];
  std::vector<int64_t> dims;
  int i = 5;
  for (; i < argc && std::strcmp(argv[i], "--") != 0; ++i) dims.push_back(std::stoll(argv[i]));
  const char* out_path = argv[i + 1];
  OrtEnv* env = nullptr;
  check(api->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "driver", &env), "CreateEnv");
  check(api->RegisterExecutionProviderLibrary(env, "KomputeDmlExecutionProvider", lib), "Register");
  const OrtEpDevice* const* devices = nullptr;
  size_t n = 0;
  check(api->GetEpDevices(env, &devices, &n), "GetEpDevices");
  std::vector<const OrtEpDevice*> ours;
  for (size_t d = 0; d < n; ++d) {
    std::printf("device %s\n", api->EpDevice_EpName(devices[d]));
    if (std::strcmp(api->EpDevice_EpName(devices[d]), "KomputeDmlExecutionProvider") == 0) ours.push_back(devices[d]);
  }
  if (ours.empty()) return 3;
  OrtSessionOptions* opts = nullptr;
  check(api->CreateSessionOptions(&opts), "CreateSessionOptions");
  check(api->SessionOptionsAppendExecutionProvider_V2(opts, env, ours.data(), 1, nullptr, nullptr, 0), "Append");
  OrtSession* session = nullptr;
  check(api->CreateSession(env, model, opts, &session), "CreateSession");
  size_t count = 1;
  for (int64_t d : dims) count *= static_cast<size_t>(d);
  std::vector<float> input(count);
  std::ifstream(in_path, std::ios::binary).read(reinterpret_cast<char*>(input.data()), count * sizeof(float));
  OrtMemoryInfo* mem = nullptr;
  check(api->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &mem), "MemoryInfo");
  OrtValue* in = nullptr;
  check(api->CreateTensorWithDataAsOrtValue(mem, input.data(), count * sizeof(float), dims.data(), dims.size(),
                                            ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &in), "CreateTensor");
  OrtAllocator* alloc = nullptr;
  check(api->GetAllocatorWithDefaultOptions(&alloc), "Allocator");
  char* out_name = nullptr;
  check(api->SessionGetOutputName(session, 0, alloc, &out_name), "OutputName");
  OrtValue* out = nullptr;
  for (int run = 0; run < 2; ++run) {  // twice: the second run reuses the compiled sub-graphs
    if (out != nullptr) api->ReleaseValue(out);
    out = nullptr;
    const char* in_names[] = {input_name};
    const char* out_names[] = {out_name};
    check(api->Run(session, nullptr, in_names, &in, 1, out_names, 1, &out), "Run");
  }
  OrtTensorTypeAndShapeInfo* info = nullptr;
  check(api->GetTensorTypeAndShape(out, &info), "Shape");
  size_t rank = 0, elems = 0;
  check(api->GetDimensionsCount(info, &rank), "Rank");
  std::vector<int64_t> odims(rank);
  check(api->GetDimensions(info, odims.data(), rank), "Dims");
  check(api->GetTensorShapeElementCount(info, &elems), "Count");
  float* data = nullptr;
  check(api->GetTensorMutableData(out, reinterpret_cast<void**>(&data)), "Data");
  std::ofstream(out_path, std::ios::binary).write(reinterpret_cast<const char*>(data), elems * sizeof(float));
  std::printf("output");
  for (int64_t d : odims) std::printf(" %lld", static_cast<long long>(d));
  std::printf("\n");
  api->ReleaseTensorTypeAndShapeInfo(info);
  api->ReleaseValue(out);
  api->ReleaseValue(in);
  check(api->AllocatorFree(alloc, out_name), "Free");
  api->ReleaseMemoryInfo(mem);
  api->ReleaseSession(session);
  api->ReleaseSessionOptions(opts);
  api->ReleaseEnv(env);
  return 0;
}
