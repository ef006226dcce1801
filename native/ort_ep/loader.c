/* The shared library onnxruntime loads (kompute_dml.ort.get_library_path()).
 *
 * It links no libpython, so the same file serves two hosts:
 *  - a Python program (import onnxruntime): the interpreter's symbols are already global;
 *  - a C/C++ program: the libpython the package was built with is loaded here (RTLD_GLOBAL)
 *    and an interpreter is started for the virtual environment the package lives in (the
 *    nearest pyvenv.cfg above this file, else the Python it was built with, else $KDML_PYTHON).
 * Then it imports kompute_dml.ort._ep (the EP's tables, ep_main.cc) and forwards ORT's two
 * entry points to it. Every Python C API function is looked up with dlsym. */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <onnxruntime_c_api.h>

#ifndef KDML_LIBPYTHON
#error "KDML_LIBPYTHON (the libpython path) must be defined by the build"
#endif
#ifndef KDML_BUILD_PYTHON
#error "KDML_BUILD_PYTHON (the interpreter the package was built with) must be defined by the build"
#endif

typedef OrtStatus* (*create_fn)(const char*, const OrtApiBase*, const OrtLogger*, OrtEpFactory**, size_t, size_t*);
typedef OrtStatus* (*release_fn)(OrtEpFactory*);
static char load_error[1024];

static create_fn create_impl;
static release_fn release_impl;

#define PYFN(ret, name, args) static ret(*p_##name) args;
PYFN(int, Py_IsInitialized, (void))
PYFN(PyGILState_STATE, PyGILState_Ensure, (void))
PYFN(void, PyGILState_Release, (PyGILState_STATE))
PYFN(PyObject*, PyImport_ImportModule, (const char*))
PYFN(PyObject*, PyObject_GetAttrString, (PyObject*, const char*))
PYFN(void*, PyLong_AsVoidPtr, (PyObject*))
PYFN(void, Py_DecRef, (PyObject*))
PYFN(void, PyErr_Print, (void))
PYFN(void, PyConfig_InitPythonConfig, (PyConfig*))
PYFN(PyStatus, PyConfig_SetBytesString, (PyConfig*, wchar_t**, const char*))
PYFN(PyStatus, Py_InitializeFromConfig, (const PyConfig*))
PYFN(void, PyConfig_Clear, (PyConfig*))
PYFN(PyThreadState*, PyEval_SaveThread, (void))
PYFN(int, PyStatus_Exception, (PyStatus))

static int bind(void* lib) {
#define BIND(name) if (!(p_##name = (__typeof__(p_##name))dlsym(lib, #name))) return 0;
  BIND(Py_IsInitialized) BIND(PyGILState_Ensure) BIND(PyGILState_Release) BIND(PyImport_ImportModule)
  BIND(PyObject_GetAttrString) BIND(PyLong_AsVoidPtr) BIND(Py_DecRef) BIND(PyErr_Print)
  BIND(PyConfig_InitPythonConfig) BIND(PyConfig_SetBytesString) BIND(Py_InitializeFromConfig)
  BIND(PyConfig_Clear) BIND(PyEval_SaveThread) BIND(PyStatus_Exception)
  return 1;
}

/* The python of the virtual environment holding this library, if any. */
static int venv_python(char* out, size_t size) {
  Dl_info info;
  if (!dladdr((void*)&venv_python, &info) || !info.dli_fname) return 0;
  char dir[PATH_MAX];
  if (!realpath(info.dli_fname, dir)) return 0;
  for (char* slash = strrchr(dir, '/'); slash && slash != dir; slash = strrchr(dir, '/')) {
    *slash = '\0';
    char cfg[PATH_MAX + 16];
    snprintf(cfg, sizeof cfg, "%s/pyvenv.cfg", dir);
    if (access(cfg, R_OK) == 0) {
      snprintf(out, size, "%s/bin/python3", dir);
      return access(out, X_OK) == 0;
    }
  }
  return 0;
}

static int started_here;

/* At exit, C++ static destructors of extension modules (kp's pybind11 objects) still free Python
 * objects; with no thread state that crashes. Registered after those modules load, this runs
 * first and takes the GIL for good: the process is ending. */
static void hold_gil_at_exit(void) { (void)p_PyGILState_Ensure(); }

static int start_interpreter(void) {
  char exe[PATH_MAX];
  const char* env = getenv("KDML_PYTHON");
  if (env && *env) snprintf(exe, sizeof exe, "%s", env);
  else if (!venv_python(exe, sizeof exe)) snprintf(exe, sizeof exe, "%s", KDML_BUILD_PYTHON);
  PyConfig config;
  p_PyConfig_InitPythonConfig(&config);
  config.install_signal_handlers = 0; /* the host program owns its signals */
  PyStatus st = p_PyConfig_SetBytesString(&config, &config.program_name, exe);
  if (!p_PyStatus_Exception(st)) st = p_PyConfig_SetBytesString(&config, &config.executable, exe);
  if (!p_PyStatus_Exception(st)) st = p_Py_InitializeFromConfig(&config);
  p_PyConfig_Clear(&config);
  if (p_PyStatus_Exception(st)) {
    snprintf(load_error, sizeof load_error, "could not start Python (%s): %s", exe, st.err_msg ? st.err_msg : "?");
    return 0;
  }
  p_PyEval_SaveThread(); /* ORT's threads take the GIL when they call in */
  started_here = 1;
  /* hold_gil_at_exit runs at exit: this library must stay mapped after onnxruntime unloads it */
  Dl_info self;
  if (dladdr((void*)&start_interpreter, &self) && self.dli_fname)
    dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  return 1;
}

static int load(void) {
  if (create_impl) return 1;
  void* self = dlopen(NULL, RTLD_NOW);
  if (!self || !dlsym(self, "Py_IsInitialized")) {
    if (!dlopen(KDML_LIBPYTHON, RTLD_NOW | RTLD_GLOBAL)) {
      snprintf(load_error, sizeof load_error, "%s", dlerror());
      return 0;
    }
    self = RTLD_DEFAULT;
  }
  if (!bind(RTLD_DEFAULT)) {
    snprintf(load_error, sizeof load_error, "the Python C API is not complete in this process");
    return 0;
  }
  if (!p_Py_IsInitialized() && !start_interpreter()) return 0;
  PyGILState_STATE gil = p_PyGILState_Ensure();
  int ok = 0;
  PyObject* mod = p_PyImport_ImportModule("kompute_dml.ort._ep");
  if (mod) {
    PyObject* c = p_PyObject_GetAttrString(mod, "create_factories");
    PyObject* r = p_PyObject_GetAttrString(mod, "release_factory");
    if (c && r) {
      create_impl = (create_fn)p_PyLong_AsVoidPtr(c);
      release_impl = (release_fn)p_PyLong_AsVoidPtr(r);
      ok = create_impl && release_impl;
    }
    if (c) p_Py_DecRef(c);
    if (r) p_Py_DecRef(r);
    p_Py_DecRef(mod);
  }
  if (!ok) {
    p_PyErr_Print();
    snprintf(load_error, sizeof load_error, "import kompute_dml.ort._ep failed (the traceback is on stderr)");
  }
  p_PyGILState_Release(gil);
  return ok;
}

__attribute__((visibility("default"))) OrtStatus* CreateEpFactories(const char* registered_name,
                                                                  const OrtApiBase* ort_api_base,
                                                                  const OrtLogger* logger, OrtEpFactory** factories,
                                                                  size_t max_factories, size_t* num_factories) {
  *num_factories = 0;
  if (!load()) {
    const OrtApi* api = ort_api_base->GetApi(23);
    char msg[1100];
    snprintf(msg, sizeof msg, "kompute_dml EP could not load: %s", load_error);
    return api ? api->CreateStatus(ORT_FAIL, msg) : NULL;
  }
  OrtStatus* st = create_impl(registered_name, ort_api_base, logger, factories, max_factories, num_factories);
  static int registered;
  if (started_here && !registered) { /* kompute_dml and kp are imported now */
    atexit(hold_gil_at_exit);
    registered = 1;
  }
  return st;
}

__attribute__((visibility("default"))) OrtStatus* ReleaseEpFactory(OrtEpFactory* factory) {
  return release_impl ? release_impl(factory) : NULL;
}
