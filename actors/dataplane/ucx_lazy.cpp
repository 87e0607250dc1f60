// UCX's API, loaded when the UCX data plane starts: hetflow links no libucp.
//
// Every ucp_/ucs_ function actors/dataplane/ calls is defined here with
// UCX's signature (the compiler checks each against ucp.h's declaration)
// and forwards to libucp.so.0 (and the libucs it loads), which the first
// call dlopens. Linked, UCX's libraries load and run their constructors (its
// configuration files, /proc/cpuinfo) in every process, jobs that never
// start the UCX data plane included (a preprocess job, plan, simulate,
// the shell): 5-20 ms of a start after a pause on the 2-core VM
// (2026-11-29). A function the data plane starts to call that is not
// listed here is an undefined reference at link time: add it below.
// Without the library, each call fails (UCS_ERR_UNSUPPORTED, and one
// message on stderr naming it), and data_plane = "auto" falls back to CAF.
#include <ucp/api/ucp.h>

#include "schemas/lazy_library.hpp"

// Constant-initialized (constexpr constructor): ready before any static constructor calls in.
static constinit hetflow::lazy_library ucx_lib("libucp.so.0", "UCX (Debian package libucx0), which the UCX data plane needs");

#define HF_UCX(ret, name, params, args, fail) HETFLOW_LAZY_FORWARD(ucx_lib, ret, name, params, args, fail)
#define HF_UCX_VOID(name, params, args) HETFLOW_LAZY_FORWARD_VOID(ucx_lib, name, params, args)

HF_UCX_VOID(ucp_cleanup, (ucp_context_h context_p), (context_p))
HF_UCX(ucs_status_t, ucp_config_modify, (ucp_config_t *config, const char *name, const char *value), (config, name, value), UCS_ERR_UNSUPPORTED)
HF_UCX(ucs_status_t, ucp_config_read, (const char *env_prefix, const char *filename, ucp_config_t **config_p), (env_prefix, filename, config_p), UCS_ERR_UNSUPPORTED)
HF_UCX_VOID(ucp_config_release, (ucp_config_t *config), (config))
HF_UCX(ucs_status_ptr_t, ucp_ep_close_nbx, (ucp_ep_h ep, const ucp_request_param_t *param), (ep, param), UCS_STATUS_PTR(UCS_ERR_UNSUPPORTED))
HF_UCX(ucs_status_t, ucp_ep_create, (ucp_worker_h worker, const ucp_ep_params_t *params, ucp_ep_h *ep_p), (worker, params, ep_p), UCS_ERR_UNSUPPORTED)
HF_UCX(ucs_status_t, ucp_init_version, (unsigned api_major_version, unsigned api_minor_version, const ucp_params_t *params, const ucp_config_t *config, ucp_context_h *context_p), (api_major_version, api_minor_version, params, config, context_p), UCS_ERR_UNSUPPORTED)
HF_UCX_VOID(ucp_request_cancel, (ucp_worker_h worker, void *request), (worker, request))
HF_UCX(ucs_status_t, ucp_request_check_status, (void *request), (request), UCS_ERR_UNSUPPORTED)
HF_UCX_VOID(ucp_request_free, (void *request), (request))
HF_UCX(ucs_status_ptr_t, ucp_tag_msg_recv_nbx, (ucp_worker_h worker, void *buffer, size_t count, ucp_tag_message_h message, const ucp_request_param_t *param), (worker, buffer, count, message, param), UCS_STATUS_PTR(UCS_ERR_UNSUPPORTED))
HF_UCX(ucp_tag_message_h, ucp_tag_probe_nb, (ucp_worker_h worker, ucp_tag_t tag, ucp_tag_t tag_mask, int remove, ucp_tag_recv_info_t *info), (worker, tag, tag_mask, remove, info), nullptr)
HF_UCX(ucs_status_ptr_t, ucp_tag_send_nbx, (ucp_ep_h ep, const void *buffer, size_t count, ucp_tag_t tag, const ucp_request_param_t *param), (ep, buffer, count, tag, param), UCS_STATUS_PTR(UCS_ERR_UNSUPPORTED))
HF_UCX(ucs_status_t, ucp_worker_arm, (ucp_worker_h worker), (worker), UCS_ERR_UNSUPPORTED)
HF_UCX(ucs_status_t, ucp_worker_create, (ucp_context_h context, const ucp_worker_params_t *params, ucp_worker_h *worker_p), (context, params, worker_p), UCS_ERR_UNSUPPORTED)
HF_UCX_VOID(ucp_worker_destroy, (ucp_worker_h worker), (worker))
HF_UCX(ucs_status_t, ucp_worker_get_address, (ucp_worker_h worker, ucp_address_t **address_p, size_t *address_length_p), (worker, address_p, address_length_p), UCS_ERR_UNSUPPORTED)
HF_UCX(ucs_status_t, ucp_worker_get_efd, (ucp_worker_h worker, int *fd), (worker, fd), UCS_ERR_UNSUPPORTED)
HF_UCX(unsigned, ucp_worker_progress, (ucp_worker_h worker), (worker), 0)
HF_UCX_VOID(ucp_worker_release_address, (ucp_worker_h worker, ucp_address_t *address), (worker, address))
HF_UCX(const char *, ucs_status_string, (ucs_status_t status), (status), "UCX not loaded (libucp.so.0)")
