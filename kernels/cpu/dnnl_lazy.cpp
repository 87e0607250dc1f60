// oneDNN's C API, loaded when first called: hetflow links no libdnnl.
//
// Every dnnl_* function kernels/ calls (through dnnl.hpp, which wraps the C
// API) is defined here with dnnl.h's signature (the compiler checks each
// against the header's declaration) and forwards to libdnnl.so.2, which the
// first call dlopens. Linked at start, libdnnl (38 MB, and the OpenCL
// runtime it needs) took 10 ms of every process's start on the 2-core VM
// after a pause (a program linking hetflow's libraries: 0.04 s against
// 0.03 s without it, 2026-11-29), for jobs that never touch it (preprocess,
// plan, simulate from a profile file, the shell). A dnnl_* function kernels/
// starts to call that is not listed here is an undefined reference at link
// time: add it below. Without the library, each call fails
// (dnnl_runtime_error, and one message on stderr naming the library).
#include <dnnl.h>
#include <dnnl_debug.h>

#include "schemas/lazy_library.hpp"

// Constant-initialized (constexpr constructor): ready before any static constructor calls in.
static constinit hetflow::lazy_library dnnl_lib("libdnnl.so.2", "oneDNN (Debian package libdnnl2), which the CPU kernels need");

#define HF_DNNL(ret, name, params, args, fail) HETFLOW_LAZY_FORWARD(dnnl_lib, ret, name, params, args, fail)

HF_DNNL(dnnl_status_t, dnnl_batch_normalization_backward_desc_init, (dnnl_batch_normalization_desc_t *bnrm_desc, dnnl_prop_kind_t prop_kind, const dnnl_memory_desc_t *diff_data_desc, const dnnl_memory_desc_t *data_desc, float epsilon, unsigned flags), (bnrm_desc, prop_kind, diff_data_desc, data_desc, epsilon, flags), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_batch_normalization_forward_desc_init, (dnnl_batch_normalization_desc_t *bnrm_desc, dnnl_prop_kind_t prop_kind, const dnnl_memory_desc_t *data_desc, float epsilon, unsigned flags), (bnrm_desc, prop_kind, data_desc, epsilon, flags), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_convolution_backward_data_desc_init, (dnnl_convolution_desc_t *conv_desc, dnnl_alg_kind_t alg_kind, const dnnl_memory_desc_t *diff_src_desc, const dnnl_memory_desc_t *weights_desc, const dnnl_memory_desc_t *diff_dst_desc, const dnnl_dims_t strides, const dnnl_dims_t padding_l, const dnnl_dims_t padding_r), (conv_desc, alg_kind, diff_src_desc, weights_desc, diff_dst_desc, strides, padding_l, padding_r), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_convolution_backward_weights_desc_init, (dnnl_convolution_desc_t *conv_desc, dnnl_alg_kind_t alg_kind, const dnnl_memory_desc_t *src_desc, const dnnl_memory_desc_t *diff_weights_desc, const dnnl_memory_desc_t *diff_bias_desc, const dnnl_memory_desc_t *diff_dst_desc, const dnnl_dims_t strides, const dnnl_dims_t padding_l, const dnnl_dims_t padding_r), (conv_desc, alg_kind, src_desc, diff_weights_desc, diff_bias_desc, diff_dst_desc, strides, padding_l, padding_r), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_convolution_forward_desc_init, (dnnl_convolution_desc_t *conv_desc, dnnl_prop_kind_t prop_kind, dnnl_alg_kind_t alg_kind, const dnnl_memory_desc_t *src_desc, const dnnl_memory_desc_t *weights_desc, const dnnl_memory_desc_t *bias_desc, const dnnl_memory_desc_t *dst_desc, const dnnl_dims_t strides, const dnnl_dims_t padding_l, const dnnl_dims_t padding_r), (conv_desc, prop_kind, alg_kind, src_desc, weights_desc, bias_desc, dst_desc, strides, padding_l, padding_r), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_engine_create, (dnnl_engine_t *engine, dnnl_engine_kind_t kind, size_t index), (engine, kind, index), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_engine_destroy, (dnnl_engine_t engine), (engine), dnnl_runtime_error)
HF_DNNL(dnnl_cpu_isa_t, dnnl_get_effective_cpu_isa, (void), (), dnnl_cpu_isa_all)
HF_DNNL(dnnl_status_t, dnnl_inner_product_backward_data_desc_init, (dnnl_inner_product_desc_t *ip_desc, const dnnl_memory_desc_t *diff_src_desc, const dnnl_memory_desc_t *weights_desc, const dnnl_memory_desc_t *diff_dst_desc), (ip_desc, diff_src_desc, weights_desc, diff_dst_desc), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_inner_product_backward_weights_desc_init, (dnnl_inner_product_desc_t *ip_desc, const dnnl_memory_desc_t *src_desc, const dnnl_memory_desc_t *diff_weights_desc, const dnnl_memory_desc_t *diff_bias_desc, const dnnl_memory_desc_t *diff_dst_desc), (ip_desc, src_desc, diff_weights_desc, diff_bias_desc, diff_dst_desc), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_inner_product_forward_desc_init, (dnnl_inner_product_desc_t *ip_desc, dnnl_prop_kind_t prop_kind, const dnnl_memory_desc_t *src_desc, const dnnl_memory_desc_t *weights_desc, const dnnl_memory_desc_t *bias_desc, const dnnl_memory_desc_t *dst_desc), (ip_desc, prop_kind, src_desc, weights_desc, bias_desc, dst_desc), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_memory_create, (dnnl_memory_t *memory, const dnnl_memory_desc_t *memory_desc, dnnl_engine_t engine, void *handle), (memory, memory_desc, engine, handle), dnnl_runtime_error)
HF_DNNL(int, dnnl_memory_desc_equal, (const dnnl_memory_desc_t *lhs, const dnnl_memory_desc_t *rhs), (lhs, rhs), 0)
HF_DNNL(size_t, dnnl_memory_desc_get_size, (const dnnl_memory_desc_t *memory_desc), (memory_desc), 0)
HF_DNNL(dnnl_status_t, dnnl_memory_desc_init_by_tag, (dnnl_memory_desc_t *memory_desc, int ndims, const dnnl_dims_t dims, dnnl_data_type_t data_type, dnnl_format_tag_t tag), (memory_desc, ndims, dims, data_type, tag), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_memory_destroy, (dnnl_memory_t memory), (memory), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_memory_get_data_handle, (const_dnnl_memory_t memory, void **handle), (memory, handle), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_memory_get_engine, (const_dnnl_memory_t memory, dnnl_engine_t *engine), (memory, engine), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_memory_get_memory_desc, (const_dnnl_memory_t memory, const dnnl_memory_desc_t **memory_desc), (memory, memory_desc), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_memory_set_data_handle_v2, (dnnl_memory_t memory, void *handle, dnnl_stream_t stream), (memory, handle, stream), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_pooling_backward_desc_init, (dnnl_pooling_desc_t *pool_desc, dnnl_alg_kind_t alg_kind, const dnnl_memory_desc_t *diff_src_desc, const dnnl_memory_desc_t *diff_dst_desc, const dnnl_dims_t strides, const dnnl_dims_t kernel, const dnnl_dims_t padding_l, const dnnl_dims_t padding_r), (pool_desc, alg_kind, diff_src_desc, diff_dst_desc, strides, kernel, padding_l, padding_r), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_pooling_forward_desc_init, (dnnl_pooling_desc_t *pool_desc, dnnl_prop_kind_t prop_kind, dnnl_alg_kind_t alg_kind, const dnnl_memory_desc_t *src_desc, const dnnl_memory_desc_t *dst_desc, const dnnl_dims_t strides, const dnnl_dims_t kernel, const dnnl_dims_t padding_l, const dnnl_dims_t padding_r), (pool_desc, prop_kind, alg_kind, src_desc, dst_desc, strides, kernel, padding_l, padding_r), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_post_ops_append_eltwise, (dnnl_post_ops_t post_ops, float scale, dnnl_alg_kind_t alg_kind, float alpha, float beta), (post_ops, scale, alg_kind, alpha, beta), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_post_ops_create, (dnnl_post_ops_t *post_ops), (post_ops), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_post_ops_destroy, (dnnl_post_ops_t post_ops), (post_ops), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_primitive_attr_create, (dnnl_primitive_attr_t *attr), (attr), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_primitive_attr_destroy, (dnnl_primitive_attr_t attr), (attr), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_primitive_attr_set_post_ops, (dnnl_primitive_attr_t attr, const_dnnl_post_ops_t post_ops), (attr, post_ops), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_primitive_create, (dnnl_primitive_t *primitive, const_dnnl_primitive_desc_t primitive_desc), (primitive, primitive_desc), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_primitive_desc_destroy, (dnnl_primitive_desc_t primitive_desc), (primitive_desc), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_primitive_desc_iterator_destroy, (dnnl_primitive_desc_iterator_t iterator), (iterator), dnnl_runtime_error)
HF_DNNL(dnnl_primitive_desc_t, dnnl_primitive_desc_iterator_fetch, (const_dnnl_primitive_desc_iterator_t iterator), (iterator), nullptr)
HF_DNNL(dnnl_status_t, dnnl_primitive_desc_query, (const_dnnl_primitive_desc_t primitive_desc, dnnl_query_t what, int index, void *result), (primitive_desc, what, index, result), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_primitive_destroy, (dnnl_primitive_t primitive), (primitive), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_primitive_execute, (const_dnnl_primitive_t primitive, dnnl_stream_t stream, int nargs, const dnnl_exec_arg_t *args), (primitive, stream, nargs, args), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_reorder_primitive_desc_create, (dnnl_primitive_desc_t *reorder_primitive_desc, const dnnl_memory_desc_t *src_desc, dnnl_engine_t src_engine, const dnnl_memory_desc_t *dst_desc, dnnl_engine_t dst_engine, const_dnnl_primitive_attr_t attr), (reorder_primitive_desc, src_desc, src_engine, dst_desc, dst_engine, attr), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_stream_create, (dnnl_stream_t *stream, dnnl_engine_t engine, unsigned flags), (stream, engine, flags), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_stream_destroy, (dnnl_stream_t stream), (stream), dnnl_runtime_error)
HF_DNNL(dnnl_status_t, dnnl_primitive_desc_iterator_create, (dnnl_primitive_desc_iterator_t *iterator, const_dnnl_op_desc_t op_desc, const_dnnl_primitive_attr_t attr, dnnl_engine_t engine, const_dnnl_primitive_desc_t hint_forward_primitive_desc), (iterator, op_desc, attr, engine, hint_forward_primitive_desc), dnnl_runtime_error)
HF_DNNL(const dnnl_memory_desc_t *, dnnl_primitive_desc_query_md, (const_dnnl_primitive_desc_t primitive_desc, dnnl_query_t what, int index), (primitive_desc, what, index), nullptr)
HF_DNNL(const char *, dnnl_status2str, (dnnl_status_t v), (v), "oneDNN not loaded")
