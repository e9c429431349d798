/* assignors._placement: the C kernels of rack-aware placement (assignors/racks_range.py,
 * racks_uniform.py, plan.py).
 *
 * Each function computes exactly what the Python it stands in for computes (the same sets,
 * built the same way, so even their iteration order is the same); that Python stays beside it,
 * runs where this module was not built, and is the reference the tests compare it with on
 * random inputs (tests/unit/test_placement_native.py). Pure: no IO, no state between calls.
 *
 *   deal(node, quota, extra, node_of, stride, indexes, ones, current) -> list | None
 *       racks_range._deal with `node` and `node_of` as bytes: None where a node's indexes do
 *       not fit its members (the caller raises).
 *   tally(data) -> dict
 *       racks_range._tally: each distinct byte of `data` with how often it occurs.
 *   fill(members, needs, assignments, pool, out) -> int
 *       racks_uniform._ClassSettle._fill's dealing: 0, or 1 / 2 when the pool holds too little
 *       / too much (the caller raises).
 *   greedy(supplies, capacities, weights, extras, extra_room, order) -> tuple | None
 *       plan._greedy with its visiting order given: (flow, taken, best everywhere), or None
 *       when it cannot place every unit (the caller raises).
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
    /* Exact integers: hashing them runs no Python code that could change the lists. */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyLong_CheckExact(PyList_GET_ITEM(indexes, i))) {
            PyErr_SetString(PyExc_TypeError, "deal: the indexes are integers");
            goto done;
        }
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
            /* (A current set may hold objects whose comparison runs Python code: the lists are
             * checked again after it.) */
            PyObject *mine = Py_NewRef(PyList_GET_ITEM(current, j));
            int same = is_run(mine, indexes, run, size);
            if (same > 0) {
                set = Py_NewRef(mine);
            }
            Py_DECREF(mine);
            if (same >= 0 && (PyList_GET_SIZE(current) < members || PyList_GET_SIZE(indexes) < n
                              || (ones != Py_None && PyList_GET_SIZE(ones) < n))) {
                PyErr_SetString(PyExc_RuntimeError, "deal: the arguments changed during the call");
                same = -1;
            }
            if (same < 0) {
                Py_XDECREF(set);
                Py_CLEAR(out);
                goto done;
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

/* fill: the members below their count (in order, with what each needs and its current
 * assignment) take contiguous runs of the pool ((topic, partitions ascending) in topic order);
 * each member's new assignment is out[member] (a copy of its current one, made when out has
 * none), each run a frozenset of the slice joined to what the member holds of the topic. */
static int
join_run(PyObject *mine, PyObject *topic, PyObject *seq, Py_ssize_t start, Py_ssize_t take)
{
    PyObject *slice = PyList_GetSlice(seq, start, start + take);
    if (slice == NULL) {
        return -1;
    }
    PyObject *run = PyFrozenSet_New(slice);
    Py_DECREF(slice);
    if (run == NULL) {
        return -1;
    }
    PyObject *before = PyDict_GetItemWithError(mine, topic);
    if (before == NULL && PyErr_Occurred()) {
        Py_DECREF(run);
        return -1;
    }
    Py_XINCREF(before);
    int held = before == NULL ? 0 : PyObject_IsTrue(before);
    PyObject *joined = held < 0 ? NULL : held ? PyNumber_Or(before, run) : Py_NewRef(run);
    Py_XDECREF(before);
    Py_DECREF(run);
    if (joined == NULL) {
        return -1;
    }
    int failed = PyDict_SetItem(mine, topic, joined);
    Py_DECREF(joined);
    return failed;
}

/* Where the dealing is in the pool: the pool's `at`-th topic (`topic`, its partitions `seq`,
 * `end` of them) from its `start`-th partition. */
typedef struct {
    Py_ssize_t at, start, end;
    PyObject *topic, *seq;  /* borrowed from the pool (a tuple this call owns) */
} Cursor;

/* One member's runs, as the Python loop deals them; 0, 1 when the pool holds too little, -1 on
 * an error. */
static int
fill_one(PyObject *out, PyObject *member, Py_ssize_t need, PyObject *held, PyObject *pool,
         Cursor *c)
{
    PyObject *mine = PyDict_GetItemWithError(out, member);
    if (mine == NULL) {
        if (PyErr_Occurred()) {
            return -1;
        }
        int some = PyObject_IsTrue(held);
        if (some < 0) {
            return -1;
        }
        mine = some ? PyObject_CallOneArg((PyObject *)&PyDict_Type, held) : PyDict_New();
        if (mine == NULL || PyDict_SetItem(out, member, mine) < 0) {
            Py_XDECREF(mine);
            return -1;
        }
    }
    else {
        Py_INCREF(mine);  /* (out may change under Python code a hash runs) */
    }
    int outcome = 0;
    if (!PyDict_Check(mine)) {
        PyErr_SetString(PyExc_TypeError, "fill: an assignment in out is not a dict");
        outcome = -1;
    }
    else if (c->start + need < c->end) {  /* within the topic at hand (the usual case) */
        outcome = join_run(mine, c->topic, c->seq, c->start, need);
        c->start += need;
    }
    else {
        while (outcome == 0 && need) {
            if (c->at == PyTuple_GET_SIZE(pool)) {
                outcome = 1;  /* the pool holds too little */
                break;
            }
            Py_ssize_t take = need < c->end - c->start ? need : c->end - c->start;
            outcome = join_run(mine, c->topic, c->seq, c->start, take);
            need -= take;
            c->start += take;
            if (c->start == c->end) {
                c->at += 1;
                c->start = 0;
                if (c->at < PyTuple_GET_SIZE(pool)) {
                    c->topic = PyTuple_GET_ITEM(PyTuple_GET_ITEM(pool, c->at), 0);
                    c->seq = PyTuple_GET_ITEM(PyTuple_GET_ITEM(pool, c->at), 1);
                    c->end = PyList_GET_SIZE(c->seq);
                }
            }
        }
    }
    Py_DECREF(mine);
    return outcome;
}

static PyObject *
fill(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *members_in, *needs_in, *assignments_in, *pool_in, *out;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!:fill", &PyList_Type, &members_in, &PyList_Type,
                          &needs_in, &PyList_Type, &assignments_in, &PyList_Type, &pool_in,
                          &PyDict_Type, &out)) {
        return NULL;
    }
    /* Copies (Python code run by a hash or a copy cannot change what is read here). */
    PyObject *members = PyList_AsTuple(members_in), *needs = PyList_AsTuple(needs_in),
             *assignments = PyList_AsTuple(assignments_in), *pool = PyList_AsTuple(pool_in),
             *result = NULL;
    if (members == NULL || needs == NULL || assignments == NULL || pool == NULL) {
        goto done;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(members), pools = PyTuple_GET_SIZE(pool);
    if (PyTuple_GET_SIZE(needs) != count || PyTuple_GET_SIZE(assignments) != count || pools == 0) {
        PyErr_SetString(PyExc_ValueError, "fill: members, needs and assignments differ in length, or no pool");
        goto done;
    }
    for (Py_ssize_t k = 0; k < pools; k++) {
        PyObject *entry = PyTuple_GET_ITEM(pool, k);
        if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2
            || !PyList_CheckExact(PyTuple_GET_ITEM(entry, 1))) {
            PyErr_SetString(PyExc_TypeError, "fill: the pool holds (topic, list) pairs");
            goto done;
        }
    }
    PyObject *first = PyTuple_GET_ITEM(pool, 0);
    Cursor cursor = {0, 0, PyList_GET_SIZE(PyTuple_GET_ITEM(first, 1)), PyTuple_GET_ITEM(first, 0),
                     PyTuple_GET_ITEM(first, 1)};
    int outcome = 0;
    for (Py_ssize_t j = 0; outcome == 0 && j < count; j++) {
        Py_ssize_t need = PyLong_AsSsize_t(PyTuple_GET_ITEM(needs, j));
        if (need < 0) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_ValueError, "fill: a member needs a negative count");
            }
            goto done;
        }
        outcome = fill_one(out, PyTuple_GET_ITEM(members, j), need,
                           PyTuple_GET_ITEM(assignments, j), pool, &cursor);
    }
    if (outcome >= 0) {  /* 1: too little; 2: the pool holds too much */
        result = PyLong_FromLong(outcome ? outcome : cursor.at != pools ? 2 : 0);
    }
done:
    Py_XDECREF(members);
    Py_XDECREF(needs);
    Py_XDECREF(assignments);
    Py_XDECREF(pool);
    return result;
}

/* greedy: each type (in `order`: (type, its best weight, its first best node or -1)) to its
 * best nodes while they have room (their capacity, then their share of the extras). */
static int
ints(PyObject *seq, long long *into, Py_ssize_t n)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        into[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(seq, k));
        if (into[k] == -1 && PyErr_Occurred()) {
            return -1;
        }
    }
    return 0;
}

static PyObject *
greedy(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *supplies_in, *capacities_in, *weights_in, *room_in, *order_in;
    long long extras;
    if (!PyArg_ParseTuple(args, "OOOLOO:greedy", &supplies_in, &capacities_in, &weights_in,
                          &extras, &room_in, &order_in)) {
        return NULL;
    }
    PyObject *supplies_f = NULL, *capacities_f = NULL, *weights_f = NULL, *room_f = NULL,
             *order_f = NULL, *result = NULL, *flow_out = NULL, *taken_out = NULL;
    long long *supplies = NULL, *room = NULL, *spare = NULL, *taken = NULL, *flow = NULL,
              *row = NULL;
    Py_ssize_t *visit = NULL;
    supplies_f = PySequence_Tuple(supplies_in);
    capacities_f = PySequence_Tuple(capacities_in);
    weights_f = PySequence_Tuple(weights_in);
    room_f = PySequence_Tuple(room_in);
    order_f = PySequence_Tuple(order_in);
    if (!supplies_f || !capacities_f || !weights_f || !room_f || !order_f) {
        goto done;
    }
    Py_ssize_t types = PyTuple_GET_SIZE(supplies_f);
    Py_ssize_t nodes = PyTuple_GET_SIZE(capacities_f);
    if (PyTuple_GET_SIZE(weights_f) != types || PyTuple_GET_SIZE(room_f) != nodes) {
        PyErr_SetString(PyExc_ValueError, "greedy: weights or extra room of another size");
        goto done;
    }
    size_t cells = (size_t)(types ? types : 1) * (size_t)(nodes ? nodes : 1);
    supplies = PyMem_Calloc((size_t)(types ? types : 1), sizeof(long long));
    room = PyMem_Calloc((size_t)(nodes ? nodes : 1), sizeof(long long));
    spare = PyMem_Calloc((size_t)(nodes ? nodes : 1), sizeof(long long));
    taken = PyMem_Calloc((size_t)(nodes ? nodes : 1), sizeof(long long));
    row = PyMem_Calloc((size_t)(nodes ? nodes : 1), sizeof(long long));
    visit = PyMem_Calloc((size_t)(nodes ? nodes : 1), sizeof(Py_ssize_t));
    flow = PyMem_Calloc(cells, sizeof(long long));
    if (!supplies || !room || !spare || !taken || !row || !visit || !flow) {
        PyErr_NoMemory();
        goto done;
    }
    if (ints(supplies_f, supplies, types) < 0 || ints(capacities_f, room, nodes) < 0
        || ints(room_f, spare, nodes) < 0) {
        goto done;
    }
    int best_everywhere = 1;
    Py_ssize_t steps = PyTuple_GET_SIZE(order_f);
    for (Py_ssize_t o = 0; o < steps; o++) {
        PyObject *step = PyTuple_GET_ITEM(order_f, o);
        if (!PyTuple_Check(step) || PyTuple_GET_SIZE(step) != 3) {
            PyErr_SetString(PyExc_TypeError, "greedy: the order holds (type, best, node) triples");
            goto done;
        }
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(step, 0));
        long long best = PyLong_AsLongLong(PyTuple_GET_ITEM(step, 1));
        Py_ssize_t v = PyLong_AsSsize_t(PyTuple_GET_ITEM(step, 2));
        if (PyErr_Occurred()) {
            goto done;
        }
        if (i < 0 || i >= types || v < -1 || v >= nodes) {
            PyErr_SetString(PyExc_ValueError, "greedy: a type or node out of range in the order");
            goto done;
        }
        long long s = supplies[i];
        if (!s) {
            continue;
        }
        PyObject *weights_row = PySequence_Tuple(PyTuple_GET_ITEM(weights_f, i));
        if (weights_row == NULL) {
            goto done;
        }
        int bad = PyTuple_GET_SIZE(weights_row) != nodes || ints(weights_row, row, nodes) < 0;
        Py_DECREF(weights_row);
        if (bad) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_ValueError, "greedy: a row of weights of another size");
            }
            goto done;
        }
        long long *placed = flow + (size_t)i * (size_t)nodes;
        if (v >= 0) {
            long long free = room[v];
            if (free >= s) {  /* takes the whole type */
                room[v] = free - s;
                placed[v] = s;
                continue;
            }
            long long more = s - free;
            if (extras >= more && spare[v] >= more) {  /* the whole type, with extras */
                room[v] = 0;
                spare[v] -= more;
                extras -= more;
                taken[v] += more;
                placed[v] = s;
                continue;
            }
        }
        /* The nodes by weight, highest first, then in order (Python's stable sort, reversed). */
        for (Py_ssize_t k = 0; k < nodes; k++) {
            Py_ssize_t at = k;
            while (at > 0 && row[visit[at - 1]] < row[k]) {
                visit[at] = visit[at - 1];
                at--;
            }
            visit[at] = k;
        }
        for (Py_ssize_t k = 0; k < nodes; k++) {
            Py_ssize_t u = visit[k];
            long long free = room[u];
            long long take = s < free ? s : free;
            if (extras && s > take) {  /* the node's share of the extras, too */
                long long more = s - take;
                if (spare[u] < more) {
                    more = spare[u];
                }
                if (extras < more) {
                    more = extras;
                }
                spare[u] -= more;
                extras -= more;
                taken[u] += more;
                take += more;
                free += more;
            }
            if (take) {
                room[u] = free - take;
                placed[u] = take;
                s -= take;
                if (row[u] != best) {
                    best_everywhere = 0;
                }
                if (!s) {
                    break;
                }
            }
        }
        if (s) {
            result = Py_NewRef(Py_None);  /* cannot place everything */
            goto done;
        }
    }
    flow_out = PyList_New(types);
    taken_out = PyList_New(nodes);
    if (flow_out == NULL || taken_out == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < types; i++) {
        PyObject *placed = PyList_New(nodes);
        if (placed == NULL) {
            goto done;
        }
        PyList_SET_ITEM(flow_out, i, placed);
        for (Py_ssize_t u = 0; u < nodes; u++) {
            PyObject *value = PyLong_FromLongLong(flow[(size_t)i * (size_t)nodes + u]);
            if (value == NULL) {
                goto done;
            }
            PyList_SET_ITEM(placed, u, value);
        }
    }
    for (Py_ssize_t u = 0; u < nodes; u++) {
        PyObject *value = PyLong_FromLongLong(taken[u]);
        if (value == NULL) {
            goto done;
        }
        PyList_SET_ITEM(taken_out, u, value);
    }
    result = Py_BuildValue("(OOO)", flow_out, taken_out, best_everywhere ? Py_True : Py_False);
done:
    Py_XDECREF(flow_out);
    Py_XDECREF(taken_out);
    Py_XDECREF(supplies_f);
    Py_XDECREF(capacities_f);
    Py_XDECREF(weights_f);
    Py_XDECREF(room_f);
    Py_XDECREF(order_f);
    PyMem_Free(supplies);
    PyMem_Free(room);
    PyMem_Free(spare);
    PyMem_Free(taken);
    PyMem_Free(row);
    PyMem_Free(visit);
    PyMem_Free(flow);
    return result;
}

static PyMethodDef methods[] = {
    {"deal", deal, METH_VARARGS, "Each node's indexes dealt to its members (racks_range._deal)."},
    {"tally", tally, METH_O, "Each distinct byte with how often it occurs (racks_range._tally)."},
    {"fill", fill, METH_VARARGS, "Members below their count take runs of the pool (racks_uniform)."},
    {"greedy", greedy, METH_VARARGS, "The rack plan's greedy start (plan._greedy)."},
    {NULL, NULL, 0, NULL},
};

#ifndef PLACEMENT_SOURCE
#define PLACEMENT_SOURCE ""  /* built without setup.py */
#endif

static int
exec_module(PyObject *m)
{
    /* SOURCE: the SHA-256 of the source this was built from (setup.py), to tell a stale build */
    return PyModule_AddStringConstant(m, "SOURCE", PLACEMENT_SOURCE);
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "assignors._placement",
    "C kernels of rack-aware placement (assignors/racks_range.py, racks_uniform.py, plan.py).", 0, methods,
    slots,
};

PyMODINIT_FUNC
PyInit__placement(void)
{
    return PyModuleDef_Init(&module);
}
