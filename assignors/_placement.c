/* assignors._placement: the C kernels of rack-aware range placement (assignors/racks_range.py).
 *
 * Each function computes exactly what its Python reference in racks_range.py computes (the
 * same sets, built the same way, so even their iteration order is the same); the tests compare
 * the two on random inputs (tests/unit/test_placement_native.py). Pure: no IO, no state
 * between calls.
 *
 *   deal(node, quota, extra, node_of, stride, indexes, ones, current) -> list | None
 *       racks_range._deal_python with `node` and `node_of` as bytes: None where a node's
 *       indexes do not fit its members (the caller raises).
 *   tally(data) -> dict
 *       racks_range._tally_python: each distinct byte of `data` with how often it occurs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* A new frozenset of the run's integers, made as racks_range._runs makes it: runs of five to
 * seven through a dict (`frozenset(dict.fromkeys(run))`, sized at once), others added in run
 * order (`frozenset(run)`). Its items are integers: it can be in no reference cycle, so the
 * garbage collector is not asked to track it (CPython untracks tuples and dicts of such items
 * itself); the coordinator holds targets of tens of thousands of these. */
static PyObject *
made_run(PyObject *indexes, const Py_ssize_t *run, Py_ssize_t size, PyObject *scratch)
{
    PyObject *made;
    if (size >= 5 && size <= 7) {
        PyDict_Clear(scratch);
        for (Py_ssize_t k = 0; k < size; k++) {
            if (PyDict_SetItem(scratch, PyList_GET_ITEM(indexes, run[k]), Py_None) < 0) {
                return NULL;
            }
        }
        made = PyFrozenSet_New(scratch);
    }
    else {
        made = PyFrozenSet_New(NULL);
        for (Py_ssize_t k = 0; made != NULL && k < size; k++) {
            if (PySet_Add(made, PyList_GET_ITEM(indexes, run[k])) < 0) {
                Py_CLEAR(made);
            }
        }
    }
    if (made != NULL && PyObject_GC_IsTracked(made)) {
        PyObject_GC_UnTrack(made);
    }
    return made;
}

/* `current` when it is an exact frozenset of exactly the run's integers (1), else 0; -1 on an
 * error. */
static int
is_run(PyObject *current, PyObject *indexes, const Py_ssize_t *run, Py_ssize_t size)
{
    if (!PyFrozenSet_CheckExact(current) || PySet_GET_SIZE(current) != size) {
        return 0;
    }
    for (Py_ssize_t k = 0; k < size; k++) {
        int found = PySet_Contains(current, PyList_GET_ITEM(indexes, run[k]));
        if (found <= 0) {
            return found;
        }
    }
    return 1;
}

static PyObject *
deal(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer node, node_of;
    Py_ssize_t quota, extra, stride;
    PyObject *indexes, *ones, *current;
    if (!PyArg_ParseTuple(args, "y*nny*nO!OO:deal", &node, &quota, &extra, &node_of, &stride,
                          &PyList_Type, &indexes, &ones, &current)) {
        return NULL;
    }
    PyObject *out = NULL, *scratch = NULL;
    Py_ssize_t *start = NULL, *end = NULL, *order = NULL;
    const unsigned char *nodes = node.buf, *of = node_of.buf;
    Py_ssize_t members = node.len, n = node_of.len;
    if (quota < 0 || extra < 0 || extra > members || stride < 1 || stride > 256
        || PyList_GET_SIZE(indexes) < n
        || (ones != Py_None && (!PyList_Check(ones) || PyList_GET_SIZE(ones) < n))
        || (current != Py_None && !PyList_Check(current))) {
        PyErr_SetString(PyExc_ValueError, "deal: arguments out of range");
        goto done;
    }
    start = PyMem_Calloc((size_t)stride + 1, sizeof(Py_ssize_t));
    end = PyMem_Calloc((size_t)stride, sizeof(Py_ssize_t));
    order = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Py_ssize_t));
    if (start == NULL || end == NULL || order == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* Each node's indexes, ascending, as consecutive slices of `order` (a counting sort);
     * an index whose node is out of range is in no node's pool. */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (of[i] < stride) {
            start[of[i] + 1]++;
        }
    }
    for (Py_ssize_t v = 0; v < stride; v++) {
        start[v + 1] += start[v];
        end[v] = start[v];
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (of[i] < stride) {
            order[end[of[i]]++] = i;
        }
    }
    /* Each node's members must take exactly its indexes (checked first: nothing is made for
     * an unfit placement). `start[v]` is node v's next index from here on. */
    {
        Py_ssize_t *need = PyMem_Calloc((size_t)stride, sizeof(Py_ssize_t));
        int fits = need != NULL && (quota > 0 || extra == members);  /* no empty runs */
        for (Py_ssize_t j = 0; fits && j < members; j++) {
            if (nodes[j] >= stride) {
                fits = 0;
            }
            else {
                need[nodes[j]] += j < extra ? quota + 1 : quota;
            }
        }
        for (Py_ssize_t v = 0; fits && v < stride; v++) {
            fits = need[v] == end[v] - start[v];
        }
        if (need == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        PyMem_Free(need);
        if (!fits) {
            out = Py_NewRef(Py_None);
            goto done;
        }
    }
    int keep = current != Py_None && quota > 1 && PyList_GET_SIZE(current) >= members;
    scratch = PyDict_New();
    out = PyList_New(members);
    if (scratch == NULL || out == NULL) {
        Py_CLEAR(out);
        goto done;
    }
    for (Py_ssize_t j = 0; j < members; j++) {
        Py_ssize_t size = j < extra ? quota + 1 : quota;
        const Py_ssize_t *run = order + start[nodes[j]];
        start[nodes[j]] += size;
        PyObject *set = NULL;
        if (keep) {
            PyObject *mine = PyList_GET_ITEM(current, j);
            int same = is_run(mine, indexes, run, size);
            if (same < 0) {
                Py_CLEAR(out);
                goto done;
            }
            if (same) {
                set = Py_NewRef(mine);
            }
        }
        if (set == NULL && size == 1) {
            if (ones == Py_None) {
                PyErr_SetString(PyExc_ValueError, "deal: runs of one index need the one-index sets");
                Py_CLEAR(out);
                goto done;
            }
            set = Py_NewRef(PyList_GET_ITEM(ones, run[0]));
        }
        if (set == NULL) {
            set = made_run(indexes, run, size, scratch);
            if (set == NULL) {
                Py_CLEAR(out);
                goto done;
            }
        }
        PyList_SET_ITEM(out, j, set);
    }
done:
    Py_XDECREF(scratch);
    PyMem_Free(start);
    PyMem_Free(end);
    PyMem_Free(order);
    PyBuffer_Release(&node);
    PyBuffer_Release(&node_of);
    return out;
}

static PyObject *
tally(PyObject *Py_UNUSED(module), PyObject *arg)
{
    Py_buffer data;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    Py_ssize_t counts[256] = {0};
    const unsigned char *bytes = data.buf;
    for (Py_ssize_t i = 0; i < data.len; i++) {
        counts[bytes[i]]++;
    }
    PyBuffer_Release(&data);
    PyObject *out = PyDict_New();
    for (int b = 0; out != NULL && b < 256; b++) {
        if (counts[b]) {
            PyObject *key = PyLong_FromLong(b), *value = PyLong_FromSsize_t(counts[b]);
            if (key == NULL || value == NULL || PyDict_SetItem(out, key, value) < 0) {
                Py_CLEAR(out);
            }
            Py_XDECREF(key);
            Py_XDECREF(value);
        }
    }
    return out;
}

static PyMethodDef methods[] = {
    {"deal", deal, METH_VARARGS, "Each node's indexes dealt to its members (racks_range._deal)."},
    {"tally", tally, METH_O, "Each distinct byte with how often it occurs (racks_range._tally)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "assignors._placement",
    "C kernels of rack-aware range placement (assignors/racks_range.py).", 0, methods,
};

PyMODINIT_FUNC
PyInit__placement(void)
{
    return PyModuleDef_Init(&module);
}
