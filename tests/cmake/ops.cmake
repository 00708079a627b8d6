# tests/test_ops.c runs the dlock CLI of this tree (issue 39): its cases get
# its path, as test_sentinel's and test_cluster's tool cases do.
if(TARGET dlock_cli)
  set_property(TEST ops.tls_client_cert_acl_user_from_a_config_file
    ops.sentinel_url_and_the_sentinel_port_hint
    ops.cluster_with_one_master_paused
    APPEND PROPERTY ENVIRONMENT "DLOCK_TEST_CLI=$<TARGET_FILE:dlock_cli>")
endif()
