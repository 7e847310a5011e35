# SPDX-License-Identifier: Apache-2.0
# TagflowLayers: the dependency rule of share/doc/architecture.md ("Libraries and layers"),
# checked when CMake configures. Every target defined under mpi_app/ or io/ has a layer in the
# table below; a target may link libraries of its own layer or of lower ones. A target that
# links a library of a higher layer, or a target missing from the table, stops the configure
# step with one message naming it. Included once, at the end of the top-level CMakeLists.txt,
# after every target and link is declared.
# Does not: look at #include lines (only what CMake links), check tests/, slurm_plugin/ or
# build helpers such as tagflow_warnings, or decide where a new library belongs (you do: add
# it here and to the diagram in share/doc/architecture.md, in the same commit).

# Layer table, lowest first. Keep it identical to the diagram in share/doc/architecture.md.
# A name that no folder builds in this configuration (tagflow_gpu without NCCL, the text
# libraries before they land) is simply not checked.
set(_TAGFLOW_LAYERS common foundation core engine role step serve sched program)
set(_TAGFLOW_LAYER_common     tagflow_common)
set(_TAGFLOW_LAYER_foundation tagflow_traj tagflow_text tagflow_chat tagflow_data tagflow_tokenizer tagflow_task
                              tagflow_config tagflow_cluster tagflow_health tagflow_io tagflow_reward tagflow_packing)
set(_TAGFLOW_LAYER_core       tagflow_model tagflow_gpu tagflow_sched_policy tagflow_profile tagflow_gateway)
set(_TAGFLOW_LAYER_engine     tagflow_rollout tagflow_ckpt)
set(_TAGFLOW_LAYER_role       tagflow_train tagflow_gateway_engine tagflow_sim)
set(_TAGFLOW_LAYER_step       tagflow_step)
set(_TAGFLOW_LAYER_serve      tagflow_serve)
set(_TAGFLOW_LAYER_sched      tagflow_sched)
set(_TAGFLOW_LAYER_program    tagflow_cmd tagflow)

# Appends to `out` every target declared in `dir` and the folders below it.
function(_tagflow_targets_below dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _tagflow_targets_below(${sub} more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(tagflow_check_layers)
  # name -> layer index, for every name in the table
  set(i 0)
  foreach(layer IN LISTS _TAGFLOW_LAYERS)
    foreach(t IN LISTS _TAGFLOW_LAYER_${layer})
      set(_idx_${t} ${i})
      set(_name_${t} ${layer})
    endforeach()
    math(EXPR i "${i} + 1")
  endforeach()

  # The targets under the checked folders (mpi_app/, io/).
  _tagflow_targets_below(${PROJECT_SOURCE_DIR} all)
  set(checked)
  foreach(t IN LISTS all)
    get_target_property(src ${t} SOURCE_DIR)
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${src})
    if(rel MATCHES "^(mpi_app|io)(/|$)")
      list(APPEND checked ${t})
      set(_dir_${t} ${rel})
    endif()
  endforeach()

  set(problems)
  foreach(t IN LISTS checked)
    if(NOT DEFINED _idx_${t})
      string(CONCAT msg "${t} (${_dir_${t}}/CMakeLists.txt) is not in the layer table of "
                        "share/cmake/TagflowLayers.cmake: add it to the layer it belongs to there and "
                        "to the diagram in share/doc/architecture.md")
      list(APPEND problems "${msg}")
      continue()
    endif()
    get_target_property(type ${t} TYPE)
    set(links)
    if(NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(l ${t} LINK_LIBRARIES)
      if(l)
        list(APPEND links ${l})
      endif()
    endif()
    get_target_property(l ${t} INTERFACE_LINK_LIBRARIES)
    if(l)
      list(APPEND links ${l})
    endif()
    list(REMOVE_DUPLICATES links)
    foreach(dep IN LISTS links)
      if(dep MATCHES "^\\$<LINK_ONLY:(.+)>$")
        set(dep ${CMAKE_MATCH_1})
      endif()
      if(NOT dep IN_LIST checked OR NOT DEFINED _idx_${dep})
        continue()  # outside mpi_app/ and io/ (torch, MPI, build helpers), or reported above
      endif()
      if(_idx_${dep} GREATER _idx_${t})
        string(CONCAT msg "${t} (layer ${_name_${t}}, ${_dir_${t}}) links ${dep} (layer ${_name_${dep}}, "
                          "${_dir_${dep}}), a higher layer: move the code, or change the layers in "
                          "share/cmake/TagflowLayers.cmake and share/doc/architecture.md together")
        list(APPEND problems "${msg}")
      endif()
    endforeach()
  endforeach()
  if(problems)
    list(REMOVE_DUPLICATES problems)
    string(REPLACE ";" "\n  " problems "${problems}")
    message(FATAL_ERROR "tagflow layers (share/doc/architecture.md):\n  ${problems}")
  endif()
  list(LENGTH checked n)
  message(STATUS "tagflow: layer rule holds for ${n} targets under mpi_app/ and io/")
endfunction()

tagflow_check_layers()
